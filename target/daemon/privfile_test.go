package daemon

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/target"
)

// The fake target traces into a file it is handed (traceapi.Tracer).
func (f *fakeTarget) StartTrace(spec target.TraceSpec, w io.WriteCloser) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.traceFile = w
	_, err := w.Write([]byte("pcap"))
	return err
}

func (f *fakeTarget) StopTrace() (target.TraceStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.traceFile == nil {
		return target.TraceStatus{}, target.ErrNoTrace
	}
	f.traceFile.Close()
	f.traceFile = nil
	st := target.TraceStatus{}
	st.Stopped, st.Reason = true, "stopped"
	return st, nil
}

func (f *fakeTarget) TraceStatus() (target.TraceStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return target.TraceStatus{}, f.traceFile != nil
}

// asNobody runs a command as the unprivileged user nobody (uid and gid
// 65534), as another local user would.
func asNobody(t *testing.T, args ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: acts as the user nobody through setpriv")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	out, err := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v: %v\n%s", args, err, out)
	}
}

// sharedDir returns a world-writable sticky directory, as /tmp is, where
// another user can leave files.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	// The test's temporary directories are 0700 root: let nobody in.
	for _, d := range []string{filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTraceFileRefusesOthersFiles: the daemon (root) is asked to trace into
// a path where another user has pre-created a 0666 file, or a symlink to a
// root-owned file: both are refused, the other user gets no trace, and the
// file the link points to is unchanged. A fresh path is created mode 0600.
func TestTraceFileRefusesOthersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon runs as root and nobody pre-creates the files")
	}
	td := startTestDaemon(t, nil)
	td.notes.waitFor(t, "READY=1")
	sock := td.d.config().Daemon.ControlSocket
	shared := sharedDir(t)
	start := func(file string) (int, string) {
		var errb bytes.Buffer
		c := run([]string{"trace", "start", "--socket", sock, "--host", "nqn.2014-08.org.example:h", "-w", file}, io.Discard, &errb)
		return c, errb.String()
	}

	// A 0666 file pre-created by nobody.
	planted := filepath.Join(shared, "trace.pcap")
	asNobody(t, "sh", "-c", "umask 0; : > "+planted)
	if c, msg := start(planted); c == exitOK || !strings.Contains(msg, "owned by uid 65534") {
		t.Errorf("trace into nobody's 0666 file: exit %d, %q", c, msg)
	}
	if b, _ := os.ReadFile(planted); len(b) != 0 {
		t.Errorf("nobody's file received %d bytes of trace", len(b))
	}

	// A symlink to a root-owned file.
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(shared, "link.pcap")
	asNobody(t, "ln", "-s", victim, link)
	if c, msg := start(link); c == exitOK || !strings.Contains(msg, "symbolic link") {
		t.Errorf("trace through a symlink: exit %d, %q", c, msg)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:secret\n" {
		t.Errorf("the link's target changed: %q", b)
	}

	// A fresh path: created 0600, owned by us.
	fresh := filepath.Join(shared, "mine.pcap")
	if c, msg := start(fresh); c != exitOK {
		t.Fatalf("trace into a new file: exit %d, %s", c, msg)
	}
	fi, err := os.Stat(fresh)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("new trace file: %v %v", fi.Mode(), err)
	}
	if c := run([]string{"trace", "stop", "--socket", sock}, io.Discard, io.Discard); c != exitOK {
		t.Errorf("stop: exit %d", c)
	}
	// Our own 0600 file is reused (a second trace to the same path).
	if c, msg := start(fresh); c != exitOK {
		t.Errorf("second trace into our own file: exit %d, %s", c, msg)
	}
	td.signals <- syscall.SIGTERM
	td.exit(t)
}

// TestControlSocketDirectoryOfAnotherUser: another user (nobody) has
// pre-created the directory of the daemon's control socket (a non-root
// daemon's default is /tmp/nvmetd-UID): the daemon refuses to listen there,
// since that user could replace the socket and receive what nvmetctl
// sends. A root directory that group or others may write to is refused
// too; the daemon's own directory is used.
func TestControlSocketDirectoryOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: nobody makes the directory through setpriv")
	}
	shared := sharedDir(t)
	planted := filepath.Join(shared, "nvmetd-0")
	asNobody(t, "mkdir", "-m", "0755", planted)
	if l, err := listenControl(filepath.Join(planted, "nvmetd.sock")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		if l != nil {
			l.Close()
		}
		t.Errorf("a socket directory nobody made: %v", err)
	}
	// The same through the daemon: it does not start.
	dir := isolate(t)
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--data-dir", filepath.Join(dir, "data"), "--control-socket", filepath.Join(planted, "nvmetd.sock"), "--listen", fmt.Sprintf("127.0.0.1:%d", testnode.FreePort(t))}, io.Discard, &stderr)
	}()
	select {
	case c := <-code:
		if c == exitOK || !strings.Contains(stderr.String(), "owned by uid 65534") {
			t.Errorf("nvmetd with its socket in nobody's directory: exit %d\n%s", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("nvmetd runs with its control socket in nobody's directory:\n%s", stderr.String())
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-code
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := listenControl(filepath.Join(open, "nvmetd.sock")); err == nil || !strings.Contains(err.Error(), "group or others may write") {
		if l != nil {
			l.Close()
		}
		t.Errorf("a world-writable socket directory: %v", err)
	}
	l, err := listenControl(filepath.Join(t.TempDir(), "run", "nvmetd.sock"))
	if err != nil {
		t.Fatalf("the daemon's own directory: %v", err)
	}
	l.Close()
}
