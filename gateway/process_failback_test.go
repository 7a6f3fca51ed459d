//go:build rbd

package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// The failback scenarios (issue 21; gateway/failback.go): real nvmetd-rbd
// processes, the shared Ceph cluster, the Go host.

// fbLease, fbDelay: the gateways' lease and failback delay (fbConfig).
const (
	fbLease = 3 * time.Second
	fbDelay = 2 * time.Second
)

// fbNS is one namespace of a failback scenario.
type fbNS struct {
	nsid  uint32
	group uint32
	image string
	// badClient: this gateway opens the image as a cephx user that does
	// not exist (the image cannot open there; the group configuration,
	// which names pool and image only, still agrees).
	badClient bool
}

// fbConfig writes p's configuration: the ANA groups (id: preferred
// owner) and the namespaces, in one subsystem; p.extra is added to the
// gateway section.
func (p *gwProc) fbConfig(c *cephtest.Cluster, group string, cmin int, groups map[uint32]string, nss []fbNS) {
	var ag, ns []string
	for id := uint32(1); id <= 8; id++ {
		if pref, ok := groups[id]; ok {
			ag = append(ag, fmt.Sprintf("{id: %d, preferred: %s}", id, pref))
		}
	}
	for _, n := range nss {
		client := c.ClientID
		if n.badClient {
			client = "nvmetd-nosuch"
		}
		ns = append(ns, fmt.Sprintf(`      - nsid: %d
        nguid: 6e766d65-7464-4757-8000-0000000000%02x
        ana_group: %d
        backend: {kind: rbd, pool: %s, image: %s, ceph_conf: %s, client_id: %s, keyring: %s, op_timeout: 5s}
`, n.nsid, 0xa0+n.nsid, n.group, c.Pool, n.image, c.Conf, client, c.Keyring))
	}
	y := fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 5s, log_level: info, log_format: console}
metrics: {socket: %s}
gateway:
  name: %s
  group: %s
  cluster: {ceph_conf: %s, client_id: %s, keyring: %s, pool: %s}
  lease: %s
  renew_interval: 500ms
  step_down_margin: 1s
  failback_delay: %s
  rebalance: %s
  ana_groups: [%s]
%sports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
%s`, filepath.Join(p.dir, "ctl.sock"), filepath.Join(p.dir, "metrics.sock"), p.name, group, c.Conf, c.ClientID, c.Keyring, c.Pool,
		fbLease, fbDelay, p.rebalanceSetting(), strings.Join(ag, ", "), p.extra, p.port, gwSubNQN, gwSubNQN, cmin, cmin+99, strings.Join(ns, ""))
	if err := os.WriteFile(p.cfg, []byte(y), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// fbProcs makes gw-a and gw-b (not started), stopped at the end of the
// test; cfg writes each one's configuration.
func fbProcs(t *testing.T, cfg func(p *gwProc, group string, cmin int)) (a, b *gwProc) {
	t.Helper()
	return fbProcsOf(t, buildGateway(t), cfg)
}

// fbProcsOf is fbProcs with the binary bin.
func fbProcsOf(t *testing.T, bin string, cfg func(p *gwProc, group string, cmin int)) (a, b *gwProc) {
	t.Helper()
	var rb [4]byte
	rand.Read(rb[:])
	group := "f" + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	var procs [2]*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &gwProc{t: t, name: name, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t)}
		cfg(procs[i], group, 1+100*i)
	}
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
	return procs[0], procs[1]
}

// fbHost is the Go host's subsystem, closed at the end of the test.
func fbHost(t *testing.T) *initiator.Subsystem {
	s := initiator.NewSubsystem(gwSubNQN, initiator.MultipathConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// stopAll stops the workloads at the end of the test; after a failure it
// closes the host first, so that I/O waiting for a path (the group left
// with none) fails and the workloads end instead of the test hanging.
func stopAll(t *testing.T, s *initiator.Subsystem, ws ...*verify.Workload) {
	if t.Failed() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		_ = s.Close(ctx)
		cancel()
	}
	for _, w := range ws {
		w.Stop()
	}
}

// connect adds the host's path to p.
func connect(t *testing.T, s *initiator.Subsystem, p *gwProc) *initiator.Path {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	path, err := s.AddPath(ctx, initiator.Config{Address: p.addr(), SubNQN: gwSubNQN, HostNQN: gwHostNQN,
		NrIOQueues: 2, QueueSize: 32, ReconnectDelay: 100 * time.Millisecond, KeepAliveTimeout: kato})
	if err != nil {
		t.Fatalf("connect to %s: %v", p.name, err)
	}
	return path
}

// waitGroupState waits until path p is live and reports group g in state
// st.
func waitGroupState(t *testing.T, p *initiator.Path, g uint32, st nvmeof.ANAState) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for p.Controller().State() != initiator.StateLive || p.ANAState(g) != st {
		if time.Now().After(deadline) {
			t.Fatalf("path %s: group %d not %v within %v: %v %v", p.Address(), g, st, hang, p.Controller().State(), p.ANAState(g))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fbGroupStatus is a group of `nvmetd status -o json`, with the failback
// fields (zero but for FailbackWait before the gateway joined its group).
type fbGroupStatus struct {
	ID           uint32 `json:"id"`
	Owned        bool   `json:"owned"`
	Holder       string `json:"holder"`
	Failbacks    uint32 `json:"failbacks"`
	FailbackWait string `json:"failback_wait"`
}

func (p *gwProc) groupStatus(id uint32) fbGroupStatus {
	p.t.Helper()
	var st struct {
		Gateway *struct {
			Groups []fbGroupStatus `json:"ana_groups"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(p.get("ctl.sock", "/v1/status")), &st); err != nil {
		p.t.Fatalf("%s status: %v", p.name, err)
	}
	if st.Gateway != nil {
		for _, g := range st.Gateway.Groups {
			if g.ID == id {
				return g
			}
		}
	}
	return fbGroupStatus{ID: id, FailbackWait: "(not a member of the group yet)"}
}

// holdsOff watches the preferred owner pref of group id for at least
// window after since (a lower bound: past it, the old time-only failback
// would have asked several times) and until its status says why it waits
// (reason in failback_wait): pref must not own the group meanwhile.
func holdsOff(t *testing.T, pref *gwProc, id uint32, since time.Time, window time.Duration, reason string) fbGroupStatus {
	t.Helper()
	deadline := time.Now().Add(hang)
	for {
		st := pref.groupStatus(id)
		if st.Owned {
			t.Fatalf("%s took group %d back (failback) %s after its start; it must not (%s)", pref.name, id, time.Since(since).Round(time.Millisecond), reason)
		}
		if time.Since(since) >= window && strings.Contains(st.FailbackWait, reason) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: group %d: no failback wait %q within %s: %+v", pref.name, id, reason, hang, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stallBound is the bound a hand-over's stall is reported against (never
// asserted: the machine is loaded): lease + fence + 2 × KATO, the fence
// being the blocklist command and the OSD-map wait (logged, not bounded
// here).
func stallBound() string {
	return fmt.Sprintf("lease %s + fence + 2 × KATO %s = %s + fence", fbLease, 2*kato, fbLease+2*kato)
}

// TestGatewayProcessFailbackNeedsHost (issue 21, failback (i)): the host
// is connected only to gw-b, which holds group 1 (gw-a, its preferred
// owner, started later): gw-a does not ask for the group, well past its
// failback delay, and says why (no host); the host's I/O goes on through
// gw-b without an error. Then the host connects to gw-a: the failback
// happens (a graceful hand-over, gw-b's client of the group fenced), the
// I/O moves to gw-a; a full sweep finds every acknowledged write.
func TestGatewayProcessFailbackNeedsHost(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 64<<20)
	a, b := fbProcs(t, func(p *gwProc, group string, cmin int) {
		p.fbConfig(c, group, cmin, map[uint32]string{1: "gw-a"}, []fbNS{{nsid: 1, group: 1, image: image}})
	})
	b.start()
	b.waitLog(`group 1: set-ana optimized`, 0) // not preferred: after a lease
	aStart := time.Now()
	a.start()
	s := fbHost(t)
	pb := connect(t, s, b)
	waitGroupState(t, pb, 1, nvmeof.ANAOptimized)
	h := s.Namespace(1)
	w := startWorkload(t, h, 8, 256)
	defer stopAll(t, s, w)
	waitOn(t, w, pb, time.Time{}, 100)

	// Well past the failback delay (and the old code's request): gw-a
	// waits for a host.
	st := holdsOff(t, a, 1, aStart, fbDelay+2*fbLease, "no host")
	t.Logf("gw-a, %s after its start: %+v", time.Since(aStart).Round(time.Millisecond), st)
	if strings.Contains(b.stderr.String(), "release to gw-a") {
		t.Fatalf("gw-b handed group 1 over to gw-a, which no host is connected to")
	}
	mark := time.Now()
	waitOn(t, w, pb, mark, 100)
	if err := w.Stats().Err(); err != nil {
		t.Fatalf("I/O through gw-b while gw-a waited: %v", err)
	}

	// The host connects to gw-a: failback.
	bmark := len(b.stderr.String())
	at := time.Now()
	pa := connect(t, s, a)
	waitGroupState(t, pa, 1, nvmeof.ANAOptimized)
	waitOn(t, w, pa, at, 100)
	b.waitLog(`group 1: release to gw-a: done`, bmark)
	if d, err := w.Stall(pb.Address(), at); err == nil {
		t.Logf("failback once the host connected to gw-a: stall %s (last completion through gw-b to the first through gw-a; bound %s)", d.Round(time.Millisecond), stallBound())
	} else {
		t.Logf("failback stall: %v", err)
	}
	alog := a.stderr.String()
	if i, j := strings.Index(alog, "fencing the previous holder"), strings.LastIndex(alog, "group 1: set-ana optimized"); i < 0 || i > j {
		t.Errorf("gw-a did not fence gw-b's client of the group before serving:\n%s", tail(alog, 4000))
	}
	r := sweep(t, w, h)
	t.Logf("%d verified writes, %d failovers", r.Workload.Writes, h.Failovers())
}

// TestGatewayProcessFailbackUnservable (issue 21, failback (iii)): gw-a,
// the preferred owner of group 1, cannot open its image (its namespace
// opens it as a cephx user that does not exist), while gw-b serves the
// group and the host is connected to both: gw-a never asks for the group
// (it says why), so the group never leaves gw-b (zero hand-overs over the
// window, where the old time-only failback handed it to gw-a, which served
// it with the namespace missing); the same after a restart of gw-a. The
// host's I/O never fails; a full sweep at the end.
func TestGatewayProcessFailbackUnservable(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 64<<20)
	a, b := fbProcs(t, func(p *gwProc, group string, cmin int) {
		// A namespace that one gateway opens differently (badClient) is
		// a difference of the files: with the group's configuration in
		// RADOS (the default) the first gateway's would be the group's.
		p.extra = "  group_config: file\n"
		p.fbConfig(c, group, cmin, map[uint32]string{1: "gw-a"}, []fbNS{{nsid: 1, group: 1, image: image, badClient: p.name == "gw-a"}})
	})
	b.start()
	b.waitLog(`group 1: set-ana optimized`, 0)
	s := fbHost(t)
	pb := connect(t, s, b)
	waitGroupState(t, pb, 1, nvmeof.ANAOptimized)
	h := s.Namespace(1)
	w := startWorkload(t, h, 8, 256)
	defer stopAll(t, s, w)
	waitOn(t, w, pb, time.Time{}, 100)
	handovers := func() int { return strings.Count(b.stderr.String(), "release to gw-a") }
	window := 3 * (fbDelay + fbLease)
	for run := 1; run <= 2; run++ {
		if run == 2 {
			a.signal(syscall.SIGTERM)
			if code := a.wait(); code != 0 {
				t.Fatalf("gw-a exited %d on SIGTERM", code)
			}
		}
		start := time.Now()
		a.start()
		pa := connect(t, s, a)
		if pa.Controller().State() != initiator.StateLive {
			t.Fatalf("path to gw-a not live")
		}
		st := holdsOff(t, a, 1, start, window, "cannot serve")
		t.Logf("gw-a run %d, %s after its start: %d hand-overs; %+v", run, time.Since(start).Round(time.Millisecond), handovers(), st)
		if n := handovers(); n != 0 {
			t.Fatalf("%d hand-overs of group 1 to gw-a, which cannot serve it", n)
		}
		waitOn(t, w, pb, time.Now(), 100)
		if err := w.Stats().Err(); err != nil {
			t.Fatalf("I/O: %v", err)
		}
		if run == 1 {
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			err := s.RemovePath(ctx, pa)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	r := sweep(t, w, h)
	t.Logf("%d verified writes, 0 hand-overs", r.Workload.Writes)
}

// TestGatewayProcessFailbackTwoGroups (issue 21, failback (ii)): gw-b
// holds both ANA groups (group 1 preferred by gw-a, group 2 by gw-b) under
// load, a verified workload on each group's namespace; the host connects
// to gw-a, which takes group 1 back: gw-b's release is graceful (its drain
// waits for group 1's commands only, not for group 2's, which keep
// coming), gw-b is not fenced on group 2 (it stays up, owns it, and group
// 2's I/O never fails), and the sweeps of both images find every
// acknowledged write.
func TestGatewayProcessFailbackTwoGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	img1, img2 := c.CreateImage(t, 64<<20), c.CreateImage(t, 64<<20)
	a, b := fbProcs(t, func(p *gwProc, group string, cmin int) {
		p.fbConfig(c, group, cmin, map[uint32]string{1: "gw-a", 2: "gw-b"},
			[]fbNS{{nsid: 1, group: 1, image: img1}, {nsid: 2, group: 2, image: img2}})
	})
	b.start()
	b.waitLog(`group 2: set-ana optimized`, 0)
	b.waitLog(`group 1: set-ana optimized`, 0) // not preferred: after a lease
	a.start()
	s := fbHost(t)
	pb := connect(t, s, b)
	waitGroupState(t, pb, 1, nvmeof.ANAOptimized)
	waitGroupState(t, pb, 2, nvmeof.ANAOptimized)
	h1, h2 := s.Namespace(1), s.Namespace(2)
	if h1 == nil || h2 == nil {
		t.Fatalf("namespaces %v, want 1 and 2", s.Namespaces())
	}
	w1, err := verify.Start(verify.Head(h1), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 8, ReadBack: true, Writer: 1})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := verify.Start(verify.Head(h2), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 8, ReadBack: true, Writer: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer stopAll(t, s, w1, w2)
	waitOn(t, w1, pb, time.Time{}, 100)
	waitOn(t, w2, pb, time.Time{}, 100)

	bmark := len(b.stderr.String())
	at := time.Now()
	pa := connect(t, s, a)
	waitGroupState(t, pa, 1, nvmeof.ANAOptimized)
	waitOn(t, w1, pa, at, 100)
	if i := b.waitLog(`group 1: release to gw-a(: done| failed)`, bmark); !strings.HasSuffix(b.stderr.String()[:i], ": done") {
		t.Errorf("gw-b's release of group 1 was not graceful:\n%s", grepLines(b.stderr.String()[bmark:], "release|flush|in flight"))
	}
	if d, err := w1.Stall(pb.Address(), at); err == nil {
		t.Logf("failback of group 1 under load on both groups: stall %s (bound %s)", d.Round(time.Millisecond), stallBound())
	}
	// Group 2 goes on through gw-b, which was not fenced on it.
	waitOn(t, w2, pb, time.Now(), 200)
	if b.cmd.ProcessState != nil {
		t.Fatalf("gw-b exited: %s", tail(b.stderr.String(), 4000))
	}
	if st := b.groupStatus(2); !st.Owned {
		t.Errorf("gw-b no longer owns group 2: %+v", st)
	}
	if pa.ANAState(2) != nvmeof.ANAInaccessible {
		t.Errorf("gw-a reports group 2 %v, want inaccessible", pa.ANAState(2))
	}
	if err := w2.Stats().Err(); err != nil {
		t.Errorf("group 2's I/O failed during group 1's failback: %v", err)
	}
	blog := b.stderr.String()
	if strings.Contains(blog, "fenced by another") || strings.Contains(blog, "ESHUTDOWN") {
		t.Errorf("gw-b was fenced:\n%s", grepLines(blog, "fenc|ESHUTDOWN"))
	}
	r1 := sweep(t, w1, h1)
	r2 := sweep(t, w2, h2)
	t.Logf("group 1: %d verified writes; group 2: %d verified writes, 0 errors", r1.Workload.Writes, r2.Workload.Writes)
}
