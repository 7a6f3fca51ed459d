package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testnode.RemoveBuilds()
		os.Exit(code)
	}))
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// bins builds nvmeof and nvmetd once for the package's end-to-end tests.
func bins(t *testing.T) (nvmeofBin, nvmetdBin string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "nvmeof-e2e-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "nvmeof"), ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build .: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "nvmeof"), testnode.BuildNvmetd(t)
}

// needRoot skips unless the test can mount FUSE, attach loop devices and
// mount filesystems.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE with mount(2) (no fusermount), attaches loop devices (losetup) and mounts ext4")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// env is one test's runtime directory and CLI.
type env struct {
	t       *testing.T
	dir     string
	state   string
	bin     string
	targets []*nvmetdProc // stopped after the controllers are disconnected
}

func newEnv(t *testing.T) *env {
	t.Helper()
	needRoot(t)
	bin, _ := bins(t)
	// Short paths: the control socket path must fit sockaddr_un.
	dir, err := os.MkdirTemp("", "nvmeof-e2e")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, state: filepath.Join(dir, "run"), bin: bin}
	t.Cleanup(func() {
		// Leave nothing behind, even after a failure: the daemons tear
		// down their mounts and loop devices; whatever remains is forced.
		_, _ = e.run("disconnect-all", "--force")
		e.forceCleanup()
		for _, p := range e.targets {
			p.stop(syscall.SIGTERM)
			if t.Failed() {
				b, _ := os.ReadFile(p.logf)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("nvmetd log:\n%s", b)
			}
		}
		os.RemoveAll(dir)
	})
	return e
}

// forceCleanup unmounts and detaches anything under the test's directory.
func (e *env) forceCleanup() {
	// Daemons first: a killed daemon aborts its FUSE connection, so I/O
	// stuck on an unreachable target fails instead of blocking umount.
	for _, dev := range listDirs(e.state) {
		if st, err := readStateIn(e.state, dev); err == nil && hoststate.ProcessAlive(st.PID) {
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], e.dir) {
			_, _ = hostfs.RunTool("umount", "-l", f[1])
		}
	}
	// Bounded (runTool): losetup can wait on the FUSE file behind another
	// test's loop device whose server does not answer.
	out, _ := hostfs.RunTool("losetup", "-a")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, e.dir) {
			_, _ = hostfs.RunTool("losetup", "-d", strings.TrimSuffix(strings.Fields(l)[0], ":"))
		}
	}
}

func listDirs(d string) []string {
	ents, _ := os.ReadDir(d)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func readStateIn(dir, dev string) (*hoststate.Controller, error) {
	b, err := os.ReadFile(filepath.Join(dir, dev, "state.json"))
	if err != nil {
		return nil, err
	}
	st := new(hoststate.Controller)
	return st, json.Unmarshal(b, st)
}

// run runs the CLI with the test's runtime directory.
func (e *env) run(args ...string) (string, error) {
	ctx, cancel := withTimeout(5 * time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(os.Environ(), "NVMEOF_STATE_DIR="+e.state)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("nvmeof %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func (e *env) must(args ...string) string {
	e.t.Helper()
	out, err := e.run(args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// list returns the controllers nvmeof list -o json reports.
func (e *env) list() []hoststate.Controller {
	e.t.Helper()
	var l struct {
		Controllers []hoststate.Controller `json:"controllers"`
	}
	if err := json.Unmarshal([]byte(e.must("list", "-o", "json")), &l); err != nil {
		e.t.Fatal(err)
	}
	return l.Controllers
}

// logOnFailure prints the daemons' logs if the test failed.
func (e *env) logOnFailure() {
	e.t.Cleanup(func() {
		if !e.t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(e.state, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			e.t.Logf("%s:\n%s", l, b)
		}
	})
}

// freePort is a port of 127.0.0.1 free when asked.
var freePort = testnode.FreePort

// nvmetdProc is an nvmetd process serving one subsystem with one file
// namespace.
type nvmetdProc struct {
	t      *testing.T
	bin    string
	cfg    string
	logf   string
	addr   string
	NQN    string
	cmd    *exec.Cmd
	exited chan struct{}
}

const testNQN = "nqn.2024-01.io.nvmetd.e2e:disk1"

// startNvmetd runs nvmetd on 127.0.0.1:port with a file namespace of size
// in dir (kept across restarts).
func startNvmetd(e *env, port int, size string) *nvmetdProc {
	t, dir := e.t, e.dir
	t.Helper()
	_, bin := bins(t)
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
ports:
  - id: 1
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend:
          kind: file
          path: %s
          size: %s
`, filepath.Join(dir, "nvmetd.sock"), port, testNQN, testNQN, filepath.Join(dir, "ns1.img"), size)
	p := &nvmetdProc{t: t, bin: bin, cfg: filepath.Join(dir, "nvmetd.yaml"), logf: filepath.Join(dir, "nvmetd.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), NQN: testNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)
	return p
}

func (p *nvmetdProc) start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	waitListening(p.t, p.addr, p.exited)
}

// stop sends sig and waits for the process to end.
func (p *nvmetdProc) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// waitListening waits until addr accepts TCP connections.
func waitListening(t *testing.T, addr string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("target exited before listening on %s", addr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withTimeout is a context for one step of a test.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
