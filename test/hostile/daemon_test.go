// Package hostile is the hostile-peer suite: the real nvmetd daemon runs as
// a subprocess (built with go build in TestMain), and raw peers
// (internal/testing/rawpeer) attack it over real TCP sockets on loopback. A crash
// is a dead process (exit status and "panic"/"fatal error" on its stderr);
// memory is the process's RSS (/proc/PID/status VmRSS and VmHWM) and its
// file descriptors /proc/PID/fd. Every case states its bound (a timeout in
// the daemon's configuration), waits for the protocol's answer with a
// generous guard (guard(bound)) and logs the time it measured; after every
// case the daemon is alive and a legitimate host (the initiator package)
// still connects, writes and reads back a block.
//
// Nothing here asserts that something is fast: bounds are the daemon's
// own timeouts, short (1–2 s) so that the suite is quick, and the test
// waits thirty times as long (at least two minutes) before it calls a
// bound broken. A case sets short only the timeout it tests; the daemon's
// other timeouts, and the legitimate host's keep-alive, are long, so that
// the legitimate parts of a case never run into them on a loaded machine.
package hostile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/nvmeof"
)

const (
	subNQN = "nqn.2024-01.io.nvmetd.hostile:sub1"
	// legitNQN is the well-behaved host that checks the daemon after each
	// case; attackers use other NQNs.
	legitNQN = "nqn.2014-08.org.nvmexpress:uuid:1e917000-0000-4000-8000-000000000001"
	evilNQN  = "nqn.2014-08.org.nvmexpress:uuid:e5170000-0000-4000-8000-00000000dead"
	evilNQN2 = "nqn.2014-08.org.nvmexpress:uuid:e5170000-0000-4000-8000-00000000beef"
)

var (
	evilID  = [16]byte{0xe5, 0x17, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0xde, 0xad}
	evilID2 = [16]byte{0xe5, 0x17, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0xbe, 0xef}
)

// binPath is the nvmetd binary built by TestMain.
var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	// The cases mostly wait on the daemon's timers: run them side by side
	// even on a two-CPU machine, unless -parallel was given.
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "16")
	}
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // listing tests (make fuzz-smoke): no daemon needed
	}
	if binPath = os.Getenv("HOSTILE_NVMETD"); binPath != "" {
		// Attack another build of the daemon (a release binary, a branch).
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "nvmetd-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "nvmetd")
	// A plain build (no -race): the daemon's RSS and speed are measured.
	out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/nvmetd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/nvmetd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// guard is how long a test waits for something the daemon must do within
// bound (or at once: guard(time.Second)): thirty times as long, and at
// least two minutes, so that a loaded machine never fails it. It is a hang
// guard, not a bound: a correct daemon is waited for only as long as it
// takes.
func guard(bound time.Duration) time.Duration { return max(30*bound, 2*time.Minute) }

// longTimeout is every transport timeout a case does not set itself
// (connect_timeout, stall_timeout, write_timeout): a case configures short
// only the timeout it tests, so that the legitimate parts of every case (a
// raw host's MPA exchange and Connect, a host that stops reading while the
// test looks at its socket, the legitimate host's check) can never run
// into another timeout however loaded the machine is.
const longTimeout = "5m"

// shutdownTimeout is the daemon's daemon.shutdown_timeout.
const shutdownTimeout = 10 * time.Second

// legitKATO is the keep-alive timeout of the legitimate host unless a case
// sets config.LegitKATO: long, so that its Keep Alives can never be late on
// a loaded machine (the initiator's default, 5 s, was).
const legitKATO = 2 * time.Minute

// config is what a case configures; the rest is fixed: one port on
// 127.0.0.1, one subsystem that allows any host, namespace 1.
type config struct {
	// Transport, Tuning and Limits are YAML flow-map entries ("key: value")
	// of those sections; Limits is left out when empty (the section does
	// not exist before issue 8). The transport timeouts not given in
	// Transport are longTimeout.
	Transport, Tuning, Limits []string
	// Backend is the YAML flow map of namespace 1's backend (default
	// {kind: memory, size: 64MiB}).
	Backend string
	// IOWorkers is namespace 1's io_workers (0: the shared pool).
	IOWorkers int
	// NoFile runs the daemon under prlimit --nofile=NoFile:NoFile.
	NoFile int
	// LogLevel is daemon.log_level (default info).
	LogLevel string
	// LegitKATO is the keep-alive timeout of the legitimate host that
	// checks the daemon after a case (0: legitKATO).
	LegitKATO time.Duration
	// Hosts are YAML flow maps of the hosts section (DH-HMAC-CHAP keys);
	// the legitimate host must not be among them.
	Hosts []string
	// TCP adds port 2, NVMe/TCP, serving the subsystem on
	// daemon.tcpAddr.
	TCP     bool
	tcpPort int
}

func (c *config) yaml(port int, sock string) string {
	backend := c.Backend
	if backend == "" {
		backend = "{kind: memory, size: 64MiB}"
	}
	level := c.LogLevel
	if level == "" {
		level = "info"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "daemon: {control_socket: %s, shutdown_timeout: %v, log_level: %s}\n", sock, shutdownTimeout, level)
	fmt.Fprintf(&b, "ports:\n  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}\n", port, subNQN)
	if c.TCP {
		fmt.Fprintf(&b, "  - {id: 2, address: 127.0.0.1, service_id: %d, transport: tcp, subsystems: [%s]}\n", c.tcpPort, subNQN)
	}
	fmt.Fprintf(&b, "subsystems:\n  - nqn: %s\n    allow_any_host: true\n    namespaces:\n", subNQN)
	fmt.Fprintf(&b, "      - {nsid: 1, io_workers: %d, backend: %s}\n", c.IOWorkers, backend)
	section := func(name string, kv []string) {
		if len(kv) > 0 {
			fmt.Fprintf(&b, "%s: {%s}\n", name, strings.Join(kv, ", "))
		}
	}
	transport := slices.Clone(c.Transport)
	for _, k := range []string{"connect_timeout", "stall_timeout", "write_timeout"} {
		if !slices.ContainsFunc(transport, func(kv string) bool { return strings.HasPrefix(kv, k+":") }) {
			transport = append(transport, k+": "+longTimeout)
		}
	}
	section("transport", transport)
	section("tuning", c.Tuning)
	section("limits", c.Limits)
	if len(c.Hosts) > 0 {
		fmt.Fprintf(&b, "hosts:\n")
		for _, h := range c.Hosts {
			fmt.Fprintf(&b, "  - %s\n", h)
		}
	}
	return b.String()
}

// daemon is a running nvmetd.
type daemon struct {
	t    testing.TB
	cmd  *exec.Cmd
	pid  int
	port int
	addr string
	// tcpAddr is the NVMe/TCP port's address (config.TCP).
	tcpAddr string
	sock    string
	dir     string
	cfg     config
	stderr  *logBuffer
	exited  chan struct{}
	err     error // Wait's result, after exited is closed
	// crashSeen is set once a crash was reported, so that stop does not
	// report it again.
	crashSeen atomic.Bool
}

// logBuffer keeps the daemon's stderr (JSON log lines).
type logBuffer struct{ testnode.SyncBuffer }

// lines returns the complete lines logged so far.
func (l *logBuffer) lines() []string {
	s := l.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	return strings.Split(s, "\n")
}

// freePort returns a loopback TCP port that was free a moment ago (the
// configuration takes no port 0).
var freePort = testnode.FreePort

// startDaemon runs nvmetd with cfg until the test ends. A configuration the
// daemon refuses (an unknown key before issue 8's keys exist) fails the
// test here with the daemon's own message.
func startDaemon(t testing.TB, cfg config) *daemon {
	t.Helper()
	for attempt := 0; ; attempt++ {
		d, err := tryStart(t, cfg)
		if err == nil {
			return d
		}
		if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			continue // the free port was taken in between
		}
		t.Fatalf("nvmetd did not start: %v", err)
	}
}

func tryStart(t testing.TB, cfg config) (*daemon, error) {
	dir, err := os.MkdirTemp("", "hostile-")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &daemon{t: t, cfg: cfg, port: freePort(t), dir: dir, sock: filepath.Join(dir, "ctl.sock"), stderr: &logBuffer{}, exited: make(chan struct{})}
	d.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))
	if cfg.TCP {
		cfg.tcpPort = freePort(t)
		d.tcpAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.tcpPort))
	}
	cfgFile := filepath.Join(dir, "nvmetd.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg.yaml(d.port, d.sock)), 0o644); err != nil {
		return nil, err
	}
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify.sock"), Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	defer notify.Close()
	args := []string{binPath, "--config", cfgFile, "--log-format", "json"}
	if cfg.NoFile > 0 {
		n := strconv.Itoa(cfg.NoFile)
		args = append([]string{"prlimit", "--nofile=" + n + ":" + n, "--"}, args...)
	}
	d.cmd = exec.Command(args[0], args[1:]...)
	d.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run"),
		"NOTIFY_SOCKET=" + filepath.Join(dir, "notify.sock")}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.pid = d.cmd.Process.Pid // prlimit execs nvmetd in the same process
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		_ = notify.SetReadDeadline(time.Now().Add(guard(time.Second)))
		for {
			n, err := notify.Read(buf)
			if err != nil {
				ready <- err
				return
			}
			if strings.Contains(string(buf[:n]), "READY=1") {
				ready <- nil
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			d.kill()
			return nil, fmt.Errorf("no READY=1 (%v); log:\n%s", err, d.stderr.String())
		}
	case <-d.exited:
		return nil, fmt.Errorf("nvmetd exited (%v) before READY=1; log:\n%s", d.err, d.stderr.String())
	}
	// stderr reaches us through a pipe: wait for the ready line, so that a
	// case counting log lines starts after the start-up ones.
	if _, ok := waitFor(guard(time.Second), func() bool { return strings.Contains(d.stderr.String(), `"msg":"nvmetd ready"`) }); !ok {
		d.kill()
		return nil, fmt.Errorf("no \"nvmetd ready\" log line; log:\n%s", d.stderr.String())
	}
	t.Cleanup(d.stop)
	return d, nil
}

func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// stop ends the daemon with SIGTERM (SIGKILL if it hangs) and reports a
// crash found in its log.
func (d *daemon) stop() {
	select {
	case <-d.exited:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(guard(shutdownTimeout)):
			d.t.Errorf("nvmetd did not exit within %v of SIGTERM (shutdown_timeout %v); killing it", guard(shutdownTimeout), shutdownTimeout)
			d.kill()
		}
	}
	if msg := crashText(d.stderr.String()); msg != "" && !d.crashSeen.Load() {
		d.t.Errorf("nvmetd crashed during the test:\n%s", msg)
	}
}

// crashText returns the panic or fatal error in a daemon log, if any.
func crashText(log string) string {
	for _, w := range []string{"panic: ", "fatal error: ", "WARNING: DATA RACE"} {
		if i := strings.Index(log, w); i >= 0 {
			end := min(len(log), i+3000)
			return log[i:end]
		}
	}
	return ""
}

// alive fails the test if the daemon has exited or crashed.
func (d *daemon) alive(t testing.TB, after string) {
	t.Helper()
	select {
	case <-d.exited:
		d.crashSeen.Store(true)
		t.Fatalf("nvmetd died %s: %v\n%s", after, d.err, crashOrTail(d.stderr.String()))
	default:
	}
	if msg := crashText(d.stderr.String()); msg != "" {
		d.crashSeen.Store(true)
		t.Fatalf("nvmetd crashed %s:\n%s", after, msg)
	}
}

func crashOrTail(log string) string {
	if msg := crashText(log); msg != "" {
		return msg
	}
	if len(log) > 3000 {
		return "...\n" + log[len(log)-3000:]
	}
	return log
}

// healthy checks, after a case, that the daemon is alive and that a
// legitimate host connects, writes a 4 KiB block, reads it back and
// disconnects. A host that fails to connect tries again, as a Linux host
// reconnects, until legitGuard has passed: a loaded machine may make it
// slow to log in, and the daemon may then rightly close it (a case that
// tests a short connect_timeout) or evict it as its oldest pending
// connection (a case that floods the pending caps). Any other failure (a
// connected host that cannot write or read) fails the test at once.
func (d *daemon) healthy(t testing.TB, after string) {
	t.Helper()
	d.alive(t, after)
	start := time.Now()
	var errs []error
	for {
		err := d.legitIO()
		if err == nil {
			break
		}
		errs = append(errs, err)
		d.alive(t, after)
		if !errors.Is(err, errConnect) {
			t.Fatalf("a legitimate host failed %s: %v\nlog tail:\n%s", after, errors.Join(errs...), tail(d.stderr.String(), 3000))
		}
		if time.Since(start) > legitGuard {
			t.Fatalf("a legitimate host did not get in %s: %d attempts in %v, the last ones: %v\nlog tail:\n%s",
				after, len(errs), time.Since(start).Round(time.Millisecond), errors.Join(errs[max(0, len(errs)-3):]...), tail(d.stderr.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond) // as a host's reconnect delay
	}
	if len(errs) > 0 {
		t.Logf("a legitimate host needed %d attempts %s: %v", len(errs)+1, after, errors.Join(errs...))
	}
	d.alive(t, after)
}

// legitGuard is how long healthy lets a legitimate host try to connect.
const legitGuard = 2 * time.Minute

// errConnect marks a legitimate host's failure to connect.
var errConnect = errors.New("connect")

// legitConfig is the legitimate host's initiator configuration.
func (d *daemon) legitConfig() initiator.Config {
	kato := d.cfg.LegitKATO
	if kato == 0 {
		kato = legitKATO
	}
	return initiator.Config{Address: d.addr, SubNQN: subNQN, HostNQN: legitNQN,
		NrIOQueues: 1, QueueSize: 16, NoReconnect: true, KeepAliveTimeout: kato}
}

// legitIO is the legitimate host's round trip.
func (d *daemon) legitIO() error {
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	c, err := initiator.Connect(ctx, d.legitConfig())
	if err != nil {
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	defer c.Close(ctx)
	ns := c.Namespace(1)
	if ns == nil {
		return errors.New("namespace 1 missing")
	}
	data := make([]byte, 4096)
	_, _ = rand.Read(data)
	off := int64(ns.Size()) - 4096
	if _, err := ns.WriteAtContext(ctx, data, off); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(data))
	if _, err := ns.ReadAtContext(ctx, got, off); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, data) {
		return errors.New("read back different data")
	}
	return nil
}

// procStatus returns fields of /proc/PID/status in bytes (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == field {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

func (d *daemon) rss() int64 {
	n, err := procStatus(d.pid, "VmRSS")
	if err != nil {
		d.t.Fatalf("RSS: %v", err)
	}
	return n
}

func (d *daemon) hwm() int64 {
	n, err := procStatus(d.pid, "VmHWM")
	if err != nil {
		d.t.Fatalf("HWM: %v", err)
	}
	return n
}

func (d *daemon) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.pid))
	if err != nil {
		d.t.Fatalf("fds: %v", err)
	}
	return len(ents)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// statusJSON is the part of `nvmetd status -o json` the suite reads.
type statusJSON struct {
	State       string `json:"state"`
	HealthError string `json:"health_error"`
	Target      struct {
		Ports []struct {
			ID          int    `json:"id"`
			Listening   bool   `json:"listening"`
			Error       string `json:"error"`
			Connections int    `json:"connections"`
		} `json:"ports"`
		Controllers []struct {
			CNTLID   uint16 `json:"cntlid"`
			HostNQN  string `json:"host_nqn"`
			KATO     uint32 `json:"kato_ms"`
			IOQueues int    `json:"io_queues"`
		} `json:"controllers"`
	} `json:"target"`
}

// status runs `nvmetd status -o json` against the daemon.
func (d *daemon) status(t testing.TB) *statusJSON {
	t.Helper()
	out, err := exec.Command(binPath, "status", "-o", "json", "--socket", d.sock).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		err = nil // exit 3: the status says why the daemon is degraded
	}
	if err != nil {
		t.Fatalf("nvmetd status: %v", err)
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("nvmetd status: %v\n%s", err, out)
	}
	return &st
}

// controllersOf returns the controllers of a host NQN in the status.
func (st *statusJSON) controllersOf(host string) int {
	n := 0
	for _, c := range st.Target.Controllers {
		if c.HostNQN == host {
			n++
		}
	}
	return n
}

// waitClosed waits up to guard(bound) for the target to close c and
// reports how and after how long (from start).
func waitClosed(t testing.TB, c *rawpeer.Conn, what string, start time.Time, bound time.Duration) (rawpeer.Closed, []*rawpeer.FPDU) {
	t.Helper()
	how, frames := c.WaitClosed(start.Add(guard(bound)))
	took := time.Since(start).Round(time.Millisecond)
	if how == rawpeer.Open {
		t.Errorf("%s: still open after %v (bound %v, guard %v)", what, took, bound, guard(bound))
	} else {
		t.Logf("%s: closed by %v after %v (bound %v)", what, how, took, bound)
	}
	return how, frames
}

// hostID makes a host identifier from a number.
func hostID(n int) [16]byte {
	var id [16]byte
	id[0], id[6], id[8] = 0xab, 0x40, 0x80
	id[14], id[15] = byte(n>>8), byte(n)
	return id
}

// evilHost opens an admin queue as a hostile host, connects it with kato
// and enables the controller.
func evilHost(t testing.TB, d *daemon, nqn string, id [16]byte, kato uint32, o rawpeer.Options) *rawpeer.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, nqn, id, kato, o)
	if err != nil {
		d.alive(t, "before a raw host connected")
		t.Fatalf("raw host connect: %v", err)
	}
	t.Cleanup(h.Close)
	if err := h.Enable(deadline(guard(time.Second))); err != nil {
		d.alive(t, "before a raw host enabled its controller")
		t.Fatalf("raw host enable: %v", err)
	}
	return h
}

// ioQueue opens I/O queue qid of the raw host.
func ioQueue(t testing.TB, d *daemon, h *rawpeer.Host, qid uint16, size int, o rawpeer.Options) *rawpeer.Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	q, err := h.ConnectIO(ctx, qid, size, o)
	if err != nil {
		d.alive(t, "before a raw host's I/O queue connected")
		t.Fatalf("raw host I/O queue %d: %v", qid, err)
	}
	return q
}

// dialQueue opens a raw queue connection (TCP and MPA with the CM request
// of qid/size) and fails the test if that does not work.
func dialQueue(t testing.TB, d *daemon, qid uint16, size int, o rawpeer.Options) *rawpeer.Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	q, err := rawpeer.DialQueue(ctx, d.addr, rawpeer.QueueRequest(rawpeer.CMRequest(qid, size)), o)
	if err != nil {
		d.alive(t, "before a raw queue connected")
		t.Fatalf("raw queue %d: %v", qid, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// rwSQE builds an NVM Read or Write of n bytes at lba (512-byte blocks)
// with a keyed SGL naming r at offset off.
func rwSQE(write bool, lba uint64, n int, r *rawpeer.Region, off int) *nvmeof.SQE {
	var sqe nvmeof.SQE
	if write {
		sqe.BuildWrite(1, lba, uint32(n/512))
	} else {
		sqe.BuildRead(1, lba, uint32(n/512))
	}
	sqe.SGL1().SetKeyed(r.TO+uint64(off), uint32(n), r.STag, false)
	return &sqe
}

// deadline is now plus d.
func deadline(d time.Duration) time.Time { return time.Now().Add(d) }
