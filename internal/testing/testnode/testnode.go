// Package testnode holds what the tests of several packages need to run a
// target: an in-process target on loopback (StartTarget, MemoryTarget), a
// built nvmetd binary (BuildNvmetd) run as a process (Start), a free port
// and a goroutine-safe buffer for a process's log. Only tests import it.
package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/target"
)

// Hang is the guard of every wait here (a process listening, exiting, a
// target shutting down): a bound on a hang, not an expected time.
const Hang = 2 * time.Minute

// FreePort returns a TCP port of 127.0.0.1 that was free when asked.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines (a process's stderr read while it runs).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartTarget starts a target with cfg in this process and shuts it down
// when the test ends (after the test's deferred calls: hosts close first).
func StartTarget(t testing.TB, cfg *target.Config, log *zap.Logger) *target.Target {
	t.Helper()
	if log == nil {
		log = zap.NewNop()
	}
	tg, err := target.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Hang)
		defer cancel()
		if err := tg.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	})
	return tg
}

// MemoryTarget starts a quiet target in this process serving subsystem nqn
// (any host) with one memory namespace of size ("16MiB") on a free port of
// 127.0.0.1, and returns it and the port's address.
func MemoryTarget(t testing.TB, nqn, size string) (*target.Target, string) {
	t.Helper()
	port := FreePort(t)
	tg := StartTarget(t, &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: port, Subsystems: []string{nqn}}},
		Subsystems: []target.SubsystemConfig{{NQN: nqn, AllowAnyHost: true, Namespaces: []target.NamespaceConfig{
			{NSID: 1, Backend: target.BackendConfig{Kind: "memory", Size: size}}}}},
	}, nil)
	return tg, fmt.Sprintf("127.0.0.1:%d", port)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// BuildNvmetd builds cmd/nvmetd (a plain build: the daemon under test, not
// the race detector's) once per test binary and returns its path. The
// binary lives until RemoveBuilds (from TestMain) or the system's
// temporary files are cleaned.
func BuildNvmetd(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "nvmetd-testnode-"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "nvmetd"), "./cmd/nvmetd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/nvmetd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "nvmetd")
}

// RemoveBuilds removes what BuildNvmetd built.
func RemoveBuilds() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testnode: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Env is a clean environment for an nvmetd process: PATH, and HOME and
// the XDG state and runtime directories in dir, plus extra ("K=V").
func Env(dir string, extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}
	return append(env, extra...)
}

// Process is a running program of a test (nvmetd), with its stderr.
type Process struct {
	t      testing.TB
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the process's end (exec.Cmd.Wait), once exited is closed
	// Stderr is what the process wrote to its standard error (and
	// standard output).
	Stderr *SyncBuffer
}

// Start runs bin with args in env and, if addr is not empty, waits until
// addr accepts TCP connections; it fails the test if the process exits
// first or nothing listens within Hang. The process is killed when the
// test ends if it still runs.
func Start(t testing.TB, bin string, env []string, addr string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, Stderr: &SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.Stderr, p.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	if addr != "" {
		p.WaitListening(addr)
	}
	return p
}

// WaitListening waits until addr accepts TCP connections.
func (p *Process) WaitListening(addr string) {
	p.t.Helper()
	deadline := time.Now().Add(Hang)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited before listening on %s: %s", filepath.Base(p.cmd.Path), addr, p.Stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nothing listens on %s within %v: %v\n%s", addr, Hang, err, p.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (an *exec.ExitError, or nil for exit status
// 0); call it once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Stop sends sig and waits for the process to end (SIGKILL after Hang).
// Stopping an ended process does nothing.
func (p *Process) Stop(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(Hang):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the last n bytes of s, from a line start where one is near.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < 200 {
		s = s[i+1:]
	}
	return s
}
