package daemon

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// buildBinary builds nvmetd once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not building the binary")
	}
	return testnode.BuildNvmetd(t)
}

func TestMain(m *testing.M) {
	hostIdentity = pathsIdentity
	code := m.Run()
	testnode.RemoveBuilds()
	os.Exit(code)
}

// TestBinaryCheckConfig runs the built binary's --check-config on the
// example and on invalid files.
func TestBinaryCheckConfig(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--check-config", "--config", "../../configs/nvmetd.yaml"}, 0, "the configuration is valid"},
		{[]string{"--check-config", "--config", "testdata/bad-values.yaml"}, 1, `subsystems[0].namespaces[0].nsid: 0 is reserved (must be 1..4294967294)`},
		{[]string{"--check-config", "--config", "testdata/bad-unknown-key.yaml"}, 1, "ports[0].adress: unknown key"},
		{[]string{"--config", "testdata/bad-values.yaml", "--log-format", "console"}, exitConfig, `ports[0].address: "10.0.0.300" is not an IP address`},
		{[]string{"--version"}, 0, ""},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = testnode.Env(dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("nvmetd %q: exit %d, want %d; stderr:\n%s", tt.args, code, tt.code, stderr.String())
		}
	}
}

// TestBinaryDefaultSignals runs the real binary with the built-in default
// configuration under a fake systemd (NOTIFY_SOCKET), then SIGHUP and
// SIGTERM. Until the target lands, target.Start is a skeleton and the test
// stops after checking that the daemon fails cleanly.
func TestBinaryDefaultSignals(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	notifySock, msgs := notifySocket(t, dir)

	// A free port, so the test does not depend on 4420 being free.
	port := testnode.FreePort(t)

	data := filepath.Join(dir, "data")
	proc := testnode.Start(t, bin, testnode.Env(dir, "NOTIFY_SOCKET="+notifySock), "", "--data-dir", data,
		"--control-socket", filepath.Join(dir, "ctl.sock"), "--listen", "127.0.0.1:"+strconv.Itoa(port),
		"--default-size", "16MiB", "--log-format", "json")
	stderr, exited := proc.Stderr, proc.Exited()

	waitMsg := func(prefix string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, prefix) {
					return
				}
			case <-exited:
				t.Fatalf("nvmetd exited (%v) before %q; log:\n%s", proc.Err(), prefix, stderr.String())
			case <-timeout:
				t.Fatalf("no %q; log:\n%s", prefix, stderr.String())
			}
		}
	}

	select {
	case m := <-msgs:
		if !strings.HasPrefix(m, "READY=1") {
			t.Fatalf("first notification %q", m)
		}
	case <-exited:
		err := proc.Err()
		if _, statErr := os.Stat(filepath.Join(data, "default-ns1.img")); statErr != nil {
			t.Errorf("default image not created: %v", statErr)
		}
		if strings.Contains(stderr.String(), "not implemented yet") {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
				t.Errorf("skeleton target: exit %v, want %d", err, exitFailure)
			}
			t.Skip("target.Start is still the API skeleton (\"not implemented yet\"): the daemon fails cleanly with exit 1; the signal part of this test runs once the target lands")
		}
		t.Fatalf("nvmetd exited: %v; log:\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not ready; log:\n%s", stderr.String())
	}

	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMsg("RELOADING=1")
	waitMsg("READY=1")
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitMsg("STOPPING=1")
	select {
	case <-exited:
		if err := proc.Err(); err != nil {
			t.Errorf("exit: %v; log:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit after SIGTERM; log:\n%s", stderr.String())
	}
	for _, w := range []string{`"msg":"nvmetd ready"`, `"msg":"configuration reloaded: no changes"`, `"msg":"stopped cleanly"`} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("log lacks %s:\n%s", w, stderr.String())
		}
	}
}
