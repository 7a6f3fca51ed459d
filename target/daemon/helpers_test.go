package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// isolate gives a test its own environment: no NVMETD_* or systemd
// directory variables from the caller, XDG directories and the default
// configuration path in a temporary directory. It returns that directory.
// Tests that call it cannot run in parallel (they set the environment).
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NVMETD_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for _, k := range []string{"STATE_DIRECTORY", "RUNTIME_DIRECTORY", "CONFIGURATION_DIRECTORY",
		"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	saved := defaultConfigPath
	defaultConfigPath = filepath.Join(dir, "etc", "nvmetd.yaml")
	t.Cleanup(func() { defaultConfigPath = saved })
	// This machine's host identity: derived from its machine ID, written
	// (by a start of the built-in default) into the test's directory.
	savedHost, savedID := hostPaths, hostIdentity
	hostPaths = initiator.HostPaths{HostNQN: filepath.Join(dir, "etc", "nvme", "hostnqn"), HostID: filepath.Join(dir, "etc", "nvme", "hostid"),
		MachineID: filepath.Join(dir, "etc", "machine-id")}
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hostPaths.MachineID, []byte("0123456789abcdef0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostIdentity = pathsIdentity
	t.Cleanup(func() { hostPaths, hostIdentity = savedHost, savedID })
	return dir
}

// hostPaths are where the tests' host identity is read from (and written
// to when neither file exists): this machine's, or the test directory's
// (isolate).
var hostPaths = initiator.DefaultHostPaths

// pathsIdentity is cmd/nvmetd's host identity on hostPaths.
func pathsIdentity(persist bool) (nqn, persisted string, err error) {
	var id initiator.Identity
	if persist {
		id, err = initiator.PersistentHostIdentity(hostPaths)
	} else {
		id, err = initiator.HostIdentityFrom(hostPaths)
	}
	return id.NQN, id.Persisted, err
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines.
type syncBuffer = testnode.SyncBuffer

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// notifySocket listens where a test points NOTIFY_SOCKET, as systemd does
// for a Type=notify service, and returns the socket's path and the
// messages (READY=1, RELOADING=1, ...) the daemon sends to it. It closes
// when the test ends.
func notifySocket(t *testing.T, dir string) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); conn.Close() })
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			select {
			case msgs <- string(buf[:n]):
			case <-done:
				return
			}
		}
	}()
	return path, msgs
}
