package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultExecTimeout bounds a guest command whose context has no deadline.
const DefaultExecTimeout = 5 * time.Minute

// ExecError is the error of a guest command that failed: it exited non-zero,
// or it did not finish (context done, VM gone), in which case Err says why.
type ExecError struct {
	VM       string // the VM's name
	Kernel   string // the guest kernel's release (uname -r)
	Cmd      string // the shell command
	ExitCode int    // the exit status; -1 if the command did not finish
	Stdout   string // what the command wrote to stdout
	Stderr   string // what the command wrote to stderr
	Err      error  // why the command did not finish (e.g. context.DeadlineExceeded), or nil
}

// Error names the VM, its kernel and the command, the exit status or the reason it did
// not finish, and the tail of its stderr (or stdout).
func (e *ExecError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lab: VM %q (Linux %s): guest command %q", e.VM, e.Kernel, e.Cmd)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	} else {
		fmt.Fprintf(&b, ": exit status %d", e.ExitCode)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "; stderr: %s", tail(s, 20))
	} else if s := strings.TrimSpace(e.Stdout); s != "" {
		fmt.Fprintf(&b, "; stdout: %s", tail(s, 20))
	}
	return b.String()
}

// Unwrap returns Err.
func (e *ExecError) Unwrap() error { return e.Err }

var jobSeq atomic.Uint64

// Job is a guest command started by Background.
type Job struct {
	vm   *VM
	cmd  string
	id   string
	done chan struct{}
	out  string
	err  error

	killOnce sync.Once
}

// Exec runs the shell command cmd in the guest (as root, in /root, with
// /lab and /host/bin on PATH) and returns its stdout. A non-zero exit, a
// done ctx (the command is then killed) or a dead VM gives an *ExecError,
// which carries the exit code and stderr. Without a deadline in ctx the
// command is bounded by DefaultExecTimeout.
func (vm *VM) Exec(ctx context.Context, cmd string) (string, error) {
	return vm.Background(ctx, cmd).Wait()
}

// MustExec runs cmd like Exec with DefaultExecTimeout and returns its stdout;
// it fails t (with the command's stdout and stderr) if the command fails.
func (vm *VM) MustExec(t testing.TB, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultExecTimeout)
	defer cancel()
	out, err := vm.Exec(ctx, cmd)
	if err != nil {
		var ee *ExecError
		if errors.As(err, &ee) {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, ee.Stdout, ee.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

// Background starts the shell command cmd in the guest and returns at once;
// Job.Wait returns what Exec would. The command is killed (with its process
// group) when ctx is done or Job.Kill is called. Use it for servers, e.g.
// "rping -s ...", while the test runs the client with Exec.
func (vm *VM) Background(ctx context.Context, cmd string) *Job {
	j := &Job{vm: vm, cmd: cmd, done: make(chan struct{}),
		id: fmt.Sprintf("go-%d-%d", os.Getpid(), jobSeq.Add(1))}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultExecTimeout)
		go func() { <-j.done; cancel() }()
	}
	script := fmt.Sprintf("echo $$ > /host/jobs/%s.pid\n%s\n", j.id, cmd)
	if err := writeAtomic(j.path(".job"), []byte(script)); err != nil {
		j.finish("", "", -1, err)
		return j
	}
	go j.watch(ctx)
	return j
}

// Wait waits for the job to end and returns its stdout and error (see Exec).
func (j *Job) Wait() (string, error) {
	<-j.done
	return j.out, j.err
}

// Done is closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Kill kills the job's process group (SIGTERM, then SIGKILL after 2 s) and
// waits for it to end.
func (j *Job) Kill() {
	j.kill()
	<-j.done
}

func (j *Job) path(ext string) string {
	return filepath.Join(j.vm.runDir, "share", "jobs", j.id+ext)
}

func (j *Job) watch(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var cause error
	var deadline <-chan time.Time
	for n := 0; ; n++ {
		if b, err := os.ReadFile(j.path(".rc")); err == nil {
			code, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				code = -1
				cause = fmt.Errorf("bad exit status file: %q", b)
			}
			if cause != nil {
				code = -1
			}
			j.finish(j.read(".out"), j.read(".err"), code, cause)
			return
		}
		if cause == nil && n%50 == 0 && !j.vm.alive() {
			cause = errors.New("the VM is not running (crashed or stopped); " + j.vm.crashReport())
			j.finish(j.read(".out"), j.read(".err"), -1, cause)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			if cause == nil {
				cause = ctx.Err()
				if os.Remove(j.path(".job")) == nil { // the runner had not picked it up
					j.finish("", "", -1, cause)
					return
				}
				go j.kill()
				deadline = time.After(10 * time.Second)
			}
			ctx = context.Background()
		case <-deadline:
			j.finish(j.read(".out"), j.read(".err"), -1, fmt.Errorf("%w (and the job did not die within 10 s of the kill)", cause))
			return
		}
	}
}

func (j *Job) kill() {
	j.killOnce.Do(func() {
		var pid string
		for i := 0; i < 100; i++ { // the job writes its pid first thing; give it 2 s
			if b, err := os.ReadFile(j.path(".pid")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				pid = strings.TrimSpace(string(b))
				break
			}
			select {
			case <-j.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		if pid == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = j.vm.Exec(ctx, fmt.Sprintf("kill -TERM -- -%s 2>/dev/null || kill -TERM %s; sleep 2; kill -KILL -- -%s 2>/dev/null; true", pid, pid, pid))
	})
}

func (j *Job) read(ext string) string {
	b, _ := os.ReadFile(j.path(ext))
	return string(b)
}

func (j *Job) finish(stdout, stderr string, code int, cause error) {
	for _, ext := range []string{".job", ".run", ".pid", ".out", ".err", ".rc"} {
		_ = os.Remove(j.path(ext))
	}
	j.out = stdout
	if code != 0 || cause != nil {
		j.err = &ExecError{VM: j.vm.name, Kernel: j.vm.Release(), Cmd: j.cmd, ExitCode: code, Stdout: stdout, Stderr: stderr, Err: cause}
	}
	close(j.done)
}

// WaitListening waits until a TCP socket listens on port in the guest (a
// user-space server, or a kernel one such as rping's or nvmet-rdma's siw
// listener), or ctx is done.
func (vm *VM) WaitListening(ctx context.Context, port int) error {
	return vm.waitListening(ctx, port, nil)
}

// WaitListening waits until a TCP socket listens on port in the guest, and
// fails early, with the job's output, if the job (the server) ends first.
func (j *Job) WaitListening(ctx context.Context, port int) error {
	return j.vm.waitListening(ctx, port, j)
}

func (vm *VM) waitListening(ctx context.Context, port int, j *Job) error {
	var done <-chan struct{}
	if j != nil {
		done = j.done
	}
	for {
		out, err := vm.Exec(ctx, fmt.Sprintf("ss -Hltn 'sport = :%d'", port))
		if err == nil && strings.TrimSpace(out) != "" {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lab: %s: nothing listens on guest TCP port %d: %w", vm, port, ctx.Err())
		}
		if err != nil && !vm.alive() {
			return err
		}
		select {
		case <-ctx.Done():
		case <-done:
			out, err := j.Wait()
			if err == nil {
				err = fmt.Errorf("exited with status 0; stdout: %s", tail(out, 20))
			}
			return fmt.Errorf("lab: %s: waiting for guest TCP port %d: the server ended: %w", vm, port, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeAtomic writes b to path via a temporary file and a rename, so that
// the guest never sees a partial file.
func writeAtomic(path string, b []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
