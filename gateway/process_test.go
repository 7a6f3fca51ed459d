//go:build rbd

package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// The subsystem the two gateways serve, and the host.
const (
	gwSubNQN  = "nqn.2024-01.io.nvmetd:gateway-test"
	gwHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4757-8000-000000000001"
	gwNGUID   = "6e766d65-7464-4757-8000-0000000000aa"
)

// syncBuffer is a process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gwProc is one nvmetd-rbd gateway process.
type gwProc struct {
	t      *testing.T
	name   string
	bin    string
	dir    string
	cfg    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	status int // exit status once exited
	stderr *syncBuffer
	// logs keeps the stderr of the process's earlier runs.
	logs []string
	// netns, if set, is the network namespace (ip netns name) the
	// process runs in, and host its address there (default 127.0.0.1),
	// which its port listens on.
	netns, host string
	// failback is the gateway's failback_delay (default 2s).
	failback string
	// group is the gateway group's name (a setup may choose another, for
	// both gateways).
	group string
	// env is added to the process's environment (NAME=value).
	env []string
	// extra is added to the gateway section (indented lines).
	extra string
	// rebalance is the gateway's rebalance setting; "" writes off: the
	// process tests place their groups' preferred owners on purpose
	// (failover, failback), and an automatic rebalance after a
	// gateway is gone a hold-down would move them
	// (TestGatewayProcessRebalance sets auto).
	rebalance string
}

func (p *gwProc) listenAddr() string {
	if p.host == "" {
		return "127.0.0.1"
	}
	return p.host
}

func (p *gwProc) failbackDelay() string {
	if p.failback == "" {
		return "2s"
	}
	return p.failback
}

func (p *gwProc) addr() string { return fmt.Sprintf("%s:%d", p.listenAddr(), p.port) }

// rebalanceSetting is p's gateway.rebalance (off unless the test says).
func (p *gwProc) rebalanceSetting() string {
	if p.rebalance == "" {
		return "off"
	}
	return p.rebalance
}

func (p *gwProc) writeConfig(c *cephtest.Cluster, image, group string, cmin int) {
	y := fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 5s, log_level: info, log_format: console}
metrics: {socket: %s}
gateway:
  name: %s
  group: %s
  cluster: {ceph_conf: %s, client_id: %s, keyring: %s, pool: %s}
  lease: 3s
  renew_interval: 500ms
  step_down_margin: 1s
  failback_delay: %s
  rebalance: %s
  ana_groups: [{id: 1, preferred: gw-a}]
%sports:
  - {id: 1, address: %s, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
      - nsid: 1
        nguid: %s
        ana_group: 1
        backend: {kind: rbd, pool: %s, image: %s, ceph_conf: %s, client_id: %s, keyring: %s, op_timeout: 5s}
`, filepath.Join(p.dir, "ctl.sock"), filepath.Join(p.dir, "metrics.sock"), p.name, group, c.Conf, c.ClientID, c.Keyring, c.Pool, p.failbackDelay(), p.rebalanceSetting(), p.extra, p.listenAddr(), p.port, gwSubNQN,
		gwSubNQN, cmin, cmin+99, gwNGUID, c.Pool, image, c.Conf, c.ClientID, c.Keyring)
	if err := os.WriteFile(p.cfg, []byte(y), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *gwProc) start() {
	t := p.t
	t.Helper()
	if p.stderr != nil {
		p.logs = append(p.logs, p.stderr.String())
	}
	p.stderr = &syncBuffer{}
	if p.netns != "" {
		// nsenter execs the gateway: the process is the gateway itself
		// (signals reach it).
		p.cmd = exec.Command("nsenter", "--net=/run/netns/"+p.netns, "--", p.bin, "--config", p.cfg)
	} else {
		p.cmd = exec.Command(p.bin, "--config", p.cfg)
	}
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}, p.env...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	cmd := p.cmd
	go func() {
		_ = cmd.Wait()
		p.status = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	deadline := time.Now().Add(hang)
	for {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %s", p.name, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening within %v: %s", p.name, hang, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *gwProc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// waitStopped waits until every thread of the process is stopped (state
// T in /proc/PID/task/*/stat: a SIGSTOP took effect) and returns when.
func (p *gwProc) waitStopped() time.Time {
	p.t.Helper()
	deadline := time.Now().Add(hang)
	dir := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			p.t.Fatalf("%s: %v", p.name, err)
		}
		all := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			// pid (comm) state ...: the state follows the last ')'.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				all = false
				break
			}
		}
		if all {
			return time.Now()
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not every thread stopped within %v of SIGSTOP", p.name, hang)
		}
		time.Sleep(time.Millisecond)
	}
}

// wait waits for the process to exit.
func (p *gwProc) wait() int {
	select {
	case <-p.exited:
	case <-time.After(hang):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("%s did not exit within %s:\n%s", p.name, hang, tail(p.stderr.String(), 4000))
	}
	return p.status
}

// waitLog waits until the process's log matches re (from byte from on) and
// returns the end of the match.
func (p *gwProc) waitLog(re string, from int) int {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(hang)
	for {
		s := p.stderr.String()
		if from <= len(s) {
			if loc := rx.FindStringIndex(s[from:]); loc != nil {
				return from + loc[1]
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no log matching %q within %s:\n%s", p.name, re, hang, tail(s, 6000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// buildGateway builds nvmetd with the rbd backend and the extra build tags
// (faultinject: the test-only fault injector, gateway/gwtarget/faultinject.go).
func buildGateway(t *testing.T, extraTags ...string) string {
	t.Helper()
	tags, err := exec.Command("make", "-s", "-C", "..", "rbd-tags").Output()
	if err != nil {
		t.Fatalf("make rbd-tags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nvmetd-rbd")
	all := strings.Join(append([]string{strings.TrimSpace(string(tags))}, extraTags...), ",")
	cmd := exec.Command("go", "build", "-tags", all, "-o", bin, "../cmd/nvmetd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nvmetd-rbd: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startWorkload starts the verified workload (internal/testing/verify)
// on the multipath head: workers writing versioned 4 KiB blocks in the
// first blocks of the image, each write read back and checked; the
// completions are counted per path (controller address), and each path a
// write was given up on is recorded (verify.Config.Attempts).
func startWorkload(t *testing.T, h *initiator.Head, workers int, blocks int64) *verify.Workload {
	t.Helper()
	w, err := verify.Start(verify.Head(h), verify.Config{BlockSize: 4096, Blocks: blocks, Workers: workers, ReadBack: true, Attempts: true})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// waitOn waits until n I/Os of w completed through path p after since.
func waitOn(t *testing.T, w *verify.Workload, p *initiator.Path, since time.Time, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := w.WaitCompletions(ctx, p.Address(), since, n); err != nil {
		t.Fatal(err)
	}
}

// sweep stops w and reads the whole image back through h: every block
// must hold its last acknowledged write or a later one, and the workload
// must have had no error.
func sweep(t *testing.T, w *verify.Workload, h *initiator.Head) *verify.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	r := w.Sweep(ctx, verify.Head(h))
	if err := r.Err(); err != nil {
		t.Errorf("sweep of the whole image: %v\n%s", err, r)
		return r
	}
	t.Logf("sweep of the whole image: %s", r)
	return r
}

// waitOptimized waits until path p reports group 1 optimized.
func waitOptimized(t *testing.T, p *initiator.Path) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for p.Controller().State() != initiator.StateLive || p.ANAState(1) != nvmeof.ANAOptimized {
		if time.Now().After(deadline) {
			t.Fatalf("path %s not live and optimized within %v: %v %v", p.Address(), hang, p.Controller().State(), p.ANAState(1))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blocklisted checks that every address the survivor's log says it fenced
// is in the cluster's blocklist.
func blocklisted(t *testing.T, c *cephtest.Cluster, log string) []string {
	t.Helper()
	m := regexp.MustCompile(`fencing the previous holder[^\n]*"addrs": \[([^\]]*)\]`).FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		t.Fatalf("no fence in the log:\n%s", tail(log, 4000))
	}
	var addrs []string
	for _, a := range strings.Split(m[len(m)-1][1], ",") {
		addrs = append(addrs, strings.Trim(strings.TrimSpace(a), `"`))
	}
	out, err := c.Ceph("osd", "blocklist", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if !strings.Contains(out, a) {
			t.Errorf("%s fenced but not in the blocklist:\n%s", a, out)
		}
	}
	return addrs
}

// gwPair is two nvmetd-rbd gateways, gw-a (the preferred owner of ANA
// group 1) and gw-b, serving one subsystem with one RBD image namespace,
// and the host connected to both.
type gwPair struct {
	c      *cephtest.Cluster
	image  string
	a, b   *gwProc
	s      *initiator.Subsystem
	pa, pb *initiator.Path // the host's paths to gw-a and gw-b
	h      *initiator.Head
}

// kato is the host's keep-alive timeout on both paths.
const kato = 2 * time.Second

// startGatewayPair starts gw-a, waits until it owns group 1, starts gw-b,
// connects the host to both (gw-a optimized, gw-b inaccessible) and
// stops everything at the end of the test. setup, if not nil, is called
// before the processes start.
func startGatewayPair(t *testing.T, setup func(a, b *gwProc)) *gwPair {
	t.Helper()
	return startGatewayPairOn(t, cephtest.Shared(t), setup)
}

// startGatewayPairOn is startGatewayPair on cluster c; setup, if not nil,
// is called before the configurations are written.
func startGatewayPairOn(t *testing.T, c *cephtest.Cluster, setup func(a, b *gwProc)) *gwPair {
	t.Helper()
	image := c.CreateImage(t, 64<<20)
	bin := buildGateway(t)
	var rb [4]byte
	rand.Read(rb[:])
	group := "p" + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	var procs [2]*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &gwProc{t: t, name: name, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t), group: group}
		procs[i].writeConfig(c, image, group, 1+100*i)
	}
	a, b := procs[0], procs[1]
	if setup != nil {
		setup(a, b)
		// A setup that moved a gateway (netns, host) or renamed the
		// group: the configurations again.
		for i, p := range procs {
			if p.netns != "" || p.host != "" || p.group != group || p.failback != "" || p.extra != "" {
				p.writeConfig(c, image, p.group, 1+100*i)
			}
		}
	}
	a.start()
	a.waitLog(`group 1: set-ana optimized`, 0)
	b.start()
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				p.wait()
			}
			if t.Failed() {
				t.Logf("%s log (end):\n%s", p.name, tail(p.stderr.String(), 6000))
			}
		}
	})

	s := initiator.NewSubsystem(gwSubNQN, initiator.MultipathConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_ = s.Close(ctx)
	})
	for _, p := range procs {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		_, err := s.AddPath(ctx, initiator.Config{Address: p.addr(), SubNQN: gwSubNQN, HostNQN: gwHostNQN,
			NrIOQueues: 2, QueueSize: 32, ReconnectDelay: 100 * time.Millisecond, KeepAliveTimeout: kato})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	paths := s.Paths()
	pa, pb := paths[0], paths[1]
	if len(s.Namespaces()) != 1 {
		t.Fatalf("%d namespaces, want one through both paths", len(s.Namespaces()))
	}
	waitOptimized(t, pa)
	if st := pb.ANAState(1); st != nvmeof.ANAInaccessible {
		t.Fatalf("gw-b reports group 1 %v, want inaccessible while gw-a owns it", st)
	}
	h := s.Namespace(1)
	return &gwPair{c: c, image: image, a: a, b: b, s: s, pa: pa, pb: pb, h: h}
}

// TestGatewayProcesses is the acceptance test of the gateway group with
// real processes: two nvmetd-rbd gateways serve one subsystem with one RBD
// image namespace (ANA group 1, preferred owner gw-a; distinct CNTLID
// ranges); the host is connected to both (multipath) and runs a verified
// write/read workload while (1) gw-a is SIGKILLed: gw-b fences every
// RADOS client of gw-a (checked in the cluster's blocklist) before it goes
// optimized, and the I/O continues through it; (2) gw-a is restarted: it
// takes the group back (failback: gw-b hands over, nobody is fenced);
// (3) gw-a is frozen (SIGSTOP): gw-b fences it and takes over; after
// SIGCONT gw-a's cluster operations are refused (it was blocklisted) and it
// exits 75 (EX_TEMPFAIL); (4) it is restarted: failback again; (5) it is
// stopped cleanly (SIGTERM): it releases the group and gw-b takes it
// without fencing. Zero I/O and verification errors; at the end the whole
// image is read back (verify.Workload.Sweep): every block holds its last
// acknowledged write or a later one. Failover times printed.
func TestGatewayProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	g := startGatewayPair(t, nil)
	c, a, b, pa, pb, h := g.c, g.a, g.b, g.pa, g.pb, g.h
	w := startWorkload(t, h, 8, 256)
	defer w.Stop()
	waitOn(t, w, pa, time.Time{}, 100)

	// (1) SIGKILL the owner.
	bmark := len(b.stderr.String())
	at := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait()
	waitOn(t, w, pb, at, 100)
	d, err := w.Stall(pa.Address(), at)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover on SIGKILL of the owner (lease 3s): %v (last completion through gw-a to the first through gw-b)", d)
	blog := b.stderr.String()[bmark:]
	iFence := strings.Index(blog, "fencing the previous holder")
	iOpt := strings.Index(blog, "group 1: set-ana optimized")
	if iFence < 0 || iOpt < 0 || iFence > iOpt {
		t.Fatalf("gw-b's log: fence at %d, optimized at %d: the fence must come first:\n%s", iFence, iOpt, blog)
	}
	fenced := blocklisted(t, c, blog)
	t.Logf("gw-b fenced gw-a's RADOS clients %v before going optimized", fenced)

	// (2) Restart gw-a: failback.
	bmark = len(b.stderr.String())
	at = time.Now()
	a.start()
	waitOptimized(t, pa)
	waitOn(t, w, pa, at, 100)
	if d, err := w.Stall(pb.Address(), at); err == nil {
		t.Logf("failback after the restart of gw-a (failback delay 2s): %v between the last completion through gw-b and the first through gw-a", d)
	}
	b.waitLog(`group 1: release to gw-a: done`, bmark)
	// Every hand-over is fenced (issue 21.3): gw-a fences gw-b's client
	// of the group before it serves (a write of gw-b's whose host gave up
	// on it may still be on its way to an OSD).
	if alog := a.stderr.String(); !strings.Contains(alog, "fencing the previous holder") ||
		strings.Index(alog, "fencing the previous holder") > strings.LastIndex(alog, "group 1: set-ana optimized") {
		t.Errorf("gw-a did not fence gw-b's client of the group before it served on failback:\n%s", tail(alog, 4000))
	}
	// nvmetd status shows the ownership and the fence.
	if st := a.readStatus(); st.Gateway == nil || len(st.Gateway.Groups) != 1 || !st.Gateway.Groups[0].Owned || st.Gateway.Health != "ok" {
		t.Errorf("gw-a status: %+v", st.Gateway)
	}
	// gw-b learns the new holder from its next read of the group (a tick
	// or a notify), not at the release: wait for it.
	st := b.readStatus()
	for deadline := time.Now().Add(hang); st.Gateway != nil && len(st.Gateway.Groups) == 1 &&
		st.Gateway.Groups[0].Holder != "gw-a" && time.Now().Before(deadline); st = b.readStatus() {
		time.Sleep(50 * time.Millisecond)
	}
	if st.Gateway == nil || st.Gateway.Groups[0].Owned || st.Gateway.Groups[0].Holder != "gw-a" || st.Gateway.Fences != 1 {
		t.Errorf("gw-b status: %+v", st.Gateway)
	}
	// And the metrics.
	for p, want := range map[*gwProc][]string{
		a: {`nvmetd_gateway_ana_group_owned{ana_group="1",group="` + a.group + `"} 1`, `nvmetd_gateway_fences_total 1`, `nvmetd_gateway_degraded 0`,
			`nvmetd_gateway_info{gateway="gw-a",group="` + a.group + `"} 1`},
		b: {`nvmetd_gateway_ana_group_owned{ana_group="1",group="` + a.group + `"} 0`, `nvmetd_gateway_fences_total 1`},
	} {
		m := p.get("metrics.sock", "/metrics")
		for _, w := range want {
			if !strings.Contains(m, w+"\n") {
				t.Errorf("%s metrics lack %q:\n%s", p.name, w, grepLines(m, "nvmetd_gateway"))
			}
		}
	}

	// The group's state (GET /v1/group, nvmetctl group) with the
	// configuration in RADOS (the default): both members, each running
	// version 1 (the one gw-a seeded: recorded at the start, not only
	// when a later version is applied), group 1 held by gw-a as gw-b
	// reads it, nothing to act on.
	var gst ctlclient.GroupStatus
	if err := json.Unmarshal([]byte(b.get("ctl.sock", "/v1/group")), &gst); err != nil {
		t.Fatalf("gw-b GET /v1/group: %v", err)
	}
	if gst.Version != 1 || gst.Running != 1 || len(gst.Members) != 2 || gst.Members[0].Running != 1 || gst.Members[1].Running != 1 ||
		len(gst.ANAGroups) != 1 || gst.ANAGroups[0].Holder != "gw-a" || gst.ANAGroups[0].Preferred != "gw-a" || len(gst.Problems) != 0 {
		t.Errorf("gw-b's view of the group: %+v", gst)
	}

	// (3) Freeze the owner: gw-b fences its client of the group and takes
	// over; thawed, gw-a notices the lost time (its serving deadline has
	// passed: nothing more reaches its backend) and steps down, stays a
	// member (its client of the group objects was not fenced) and, as the
	// preferred owner, takes the group back: it fences gw-b's client of
	// the group and reopens its namespace on a new RADOS client first.
	bmark = len(b.stderr.String())
	at = time.Now()
	a.signal(syscall.SIGSTOP)
	waitOn(t, w, pb, at, 100)
	d, err = w.Stall(pa.Address(), at)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover on SIGSTOP of the owner (lease 3s, host keep-alive 2s): %v", d)
	b.waitLog(`group 1: set-ana optimized`, bmark)
	blog = b.stderr.String()[bmark:]
	if i, j := strings.Index(blog, "fencing the previous holder"), strings.Index(blog, "group 1: set-ana optimized"); i < 0 || i > j {
		t.Fatalf("gw-b's log: fence at %d, optimized at %d:\n%s", i, j, blog)
	}
	blocklisted(t, c, blog)
	amark := len(a.stderr.String())
	at = time.Now()
	a.signal(syscall.SIGCONT)
	iDown := a.waitLog(`stepped down from group`, amark)
	iBack := a.waitLog(`group 1: set-ana optimized`, amark)
	alog := a.stderr.String()
	if iBack < iDown || !strings.Contains(alog[iDown:iBack], "fencing the previous holder") {
		t.Errorf("gw-a after SIGCONT: it must step down, then fence gw-b's client of the group, then serve:\n%s", tail(alog[amark:], 4000))
	}
	waitOptimized(t, pa)
	waitOn(t, w, pa, at, 100)
	t.Logf("gw-a after SIGCONT:\n%s", grepLines(alog[amark:], "fenc|step|reopen|set-ana|ESHUTDOWN"))

	// (5) A clean stop (SIGTERM) of the owner: it releases the group, and
	// gw-b takes it at once (the release notifies), fencing gw-a's client
	// of the group first (every hand-over is fenced).
	at = time.Now()
	a.signal(syscall.SIGTERM)
	if code := a.wait(); code != 0 {
		t.Fatalf("gw-a exited %d on SIGTERM:\n%s", code, tail(a.stderr.String(), 4000))
	}
	if !strings.Contains(a.stderr.String(), "released group at shutdown") {
		t.Errorf("gw-a did not release its group on SIGTERM:\n%s", tail(a.stderr.String(), 4000))
	}
	waitOn(t, w, pb, at, 100)
	if d, err := w.Stall(pa.Address(), at); err == nil {
		t.Logf("failover on SIGTERM of the owner (released, fenced): %v", d)
	}
	// The whole image read back: no write lost or landed late across
	// the five hand-overs.
	r := sweep(t, w, h)
	// gw-b fenced at each of its three takeovers (SIGKILL, SIGSTOP,
	// SIGTERM).
	if st := b.readStatus(); st.Gateway == nil || st.Gateway.Fences != 3 || !st.Gateway.Groups[0].Owned {
		t.Errorf("gw-b status at the end: %+v, want the owner with 3 fences", st.Gateway)
	}
	t.Logf("%d verified writes (each read back), %d failovers, 0 errors", r.Workload.Writes, h.Failovers())
}

// procStatus is the part of `nvmetd status -o json` the test reads.
type procStatus struct {
	Gateway *struct {
		Health string `json:"health"`
		Fences int    `json:"fences"`
		Groups []struct {
			ID     uint32 `json:"id"`
			Owned  bool   `json:"owned"`
			Holder string `json:"holder"`
			Role   string `json:"role"`
		} `json:"ana_groups"`
	} `json:"gateway"`
}

// get GETs path through the process's unix socket sock.
func (p *gwProc) get(sock, path string) string {
	p.t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(p.dir, sock))
	}}}
	resp, err := c.Get("http://nvmetd" + path)
	if err != nil {
		p.t.Fatalf("%s %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("%s %s: %v", p.name, path, err)
	}
	return string(b)
}

// readStatus reads the process's status through its control socket.
func (p *gwProc) readStatus() procStatus {
	p.t.Helper()
	var st procStatus
	if err := json.Unmarshal([]byte(p.get("ctl.sock", "/v1/status")), &st); err != nil {
		p.t.Fatalf("%s status: %v", p.name, err)
	}
	return st
}

func grepLines(s, re string) string {
	rx := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if rx.MatchString(l) {
			out = append(out, "  "+l)
		}
	}
	return strings.Join(out, "\n")
}
