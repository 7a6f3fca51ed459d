package metricserve

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestPasswordFileOfOthers: the basic authentication password file is
// refused when others may read it, or when another user (nobody) made it
// (they chose the password); the daemon's own 0600 file is read.
func TestPasswordFileOfOthers(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own.pw")
	if err := os.WriteFile(own, []byte("s3cret\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := ReadPasswordFile(own); err != nil || pw != "s3cret" {
		t.Fatalf("own file: %q %v", pw, err)
	}
	loose := filepath.Join(dir, "loose.pw")
	if err := os.WriteFile(loose, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPasswordFile(loose); err == nil || !strings.Contains(err.Error(), "group or others") {
		t.Errorf("a 0644 password file: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for the rest: nobody makes a file through setpriv")
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{shared, dir, filepath.Dir(dir)} {
		mode := os.FileMode(0o755)
		if d == shared {
			mode = os.ModeSticky | 0o777
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	planted := filepath.Join(shared, "metrics.pw")
	if out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c", "umask 077; echo chosen > "+planted).CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if _, err := ReadPasswordFile(planted); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("nobody's password file: %v", err)
	}
}

// TestBasicAuthOverPlainHTTPWarns: basic authentication on a TCP address
// without TLS is served, with a warning; on a unix socket it is not warned
// about.
func TestBasicAuthOverPlainHTTPWarns(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	s, err := Start(Config{Address: "127.0.0.1:0", User: "prom", Password: "s3cret"}, reg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if n := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("plain HTTP").Len(); n != 1 {
		t.Errorf("%d warnings about basic authentication over plain HTTP", n)
	}
	sock := filepath.Join(t.TempDir(), "m.sock")
	s, err = Start(Config{Socket: sock, User: "prom", Password: "s3cret"}, reg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
	}
	s.Close()
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("a unix socket warned too: %d warnings", n)
	}
}
