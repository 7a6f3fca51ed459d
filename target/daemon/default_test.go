package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/nvmeof"
)

var (
	nvmeofOnce sync.Once
	nvmeofBin  string
	nvmeofErr  error
)

// buildNvmeof builds cmd/nvmeof once per test run, into a directory that
// every user may enter (the tests run it as nobody too).
func buildNvmeof(t *testing.T) string {
	t.Helper()
	nvmeofOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nvmetd-test-nvmeof-")
		if err != nil {
			nvmeofErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			nvmeofErr = err
			return
		}
		nvmeofBin = filepath.Join(dir, "nvmeof")
		if out, err := exec.Command("go", "build", "-o", nvmeofBin, "../../cmd/nvmeof").CombinedOutput(); err != nil {
			nvmeofErr = err
			t.Logf("%s", out)
		}
	})
	if nvmeofErr != nil {
		t.Fatalf("go build ./cmd/nvmeof: %v", nvmeofErr)
	}
	return nvmeofBin
}

// TestBuiltinDefaultRefusesOtherUsers runs the built nvmetd with its
// built-in default and attacks it as another local user: nobody runs the
// built nvmeof (the Go host needs no privilege) against 127.0.0.1 with this
// machine's host NQN, and is refused, with or without pointing at the key
// file it cannot read. Root, with the key the daemon generated into the
// data directory (given, or picked up by nvmeof), writes.
func TestBuiltinDefaultRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs nvmeof as the user nobody through setpriv")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	bin := buildBinary(t)
	host := buildNvmeof(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	port := strconv.Itoa(testnode.FreePort(t))
	p := testnode.Start(t, bin, testnode.Env(dir), "127.0.0.1:"+port, "--data-dir", data, "--listen", "127.0.0.1:"+port,
		"--control-socket", filepath.Join(dir, "ctl.sock"), "--default-size", "16MiB", "--log-format", "console")
	defer p.Stop(15)
	// The subsystem NQN as the ready line prints it.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.Stderr.String(), "nvmetd ready") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	m := regexp.MustCompile(` -n (nqn\.[^ "]+)`).FindStringSubmatch(p.Stderr.String())
	if m == nil {
		t.Fatalf("no subsystem NQN in the ready line:\n%s", p.Stderr.String())
	}
	nqn := m[1]
	if err := nvmeof.ValidateNQN(nqn); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(data, "default-host.key")
	checkKey := func() {
		if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("key file: %v %v", fi, err)
			return
		}
		if strings.Contains(p.Stderr.String(), strings.TrimSpace(mustRead(t, keyFile))) {
			t.Error("the log shows the key")
		}
		if !strings.Contains(p.Stderr.String(), `--dhchap-secret \"$(cat `+keyFile+`)\"`) {
			t.Errorf("the ready line does not show how to pass the key:\n%s", p.Stderr.String())
		}
	}
	bench := func(asNobody bool, extra ...string) (string, error) {
		state := filepath.Join(dir, "state-root")
		if asNobody {
			state = filepath.Join(dir, "state-nobody")
		}
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"bench", "-t", "rdma", "-a", "127.0.0.1", "-s", port, "-n", nqn, "--ctrl-loss-tmo", "0",
			"--rw", "write", "--bs", "4k", "--iodepth", "1", "--size", "1m", "--runtime", "1s", "--state-dir", state}, extra...)
		cmd := exec.Command(host, args...)
		if asNobody {
			if err := os.Chown(state, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			cmd = exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", host}, args...)...)
		}
		// NVMETD_DATA_DIR: where nvmeof looks for the default's key.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + state, "NVMETD_DATA_DIR=" + data}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := bench(true); err == nil {
		t.Errorf("nobody wrote to the built-in default's namespace:\n%s", out)
	} else {
		t.Logf("nobody, no key: %v\n%s", err, out)
	}
	if out, err := bench(true, "--dhchap-secret", "file:"+keyFile); err == nil {
		t.Errorf("nobody wrote with the key file:\n%s", out)
	} else if !strings.Contains(out, "permission denied") {
		t.Errorf("nobody with the key file: %v\n%s", err, out)
	}
	checkKey()
	if out, err := bench(false, "--dhchap-secret", "file:"+keyFile); err != nil {
		t.Errorf("root with the key: %v\n%s\nnvmetd:\n%s", err, out, p.Stderr.String())
	}
	// nvmeof finds the key itself in the daemon's data directory.
	if out, err := bench(false); err != nil {
		t.Errorf("root, the key picked up from the data directory: %v\n%s", err, out)
	}
}
