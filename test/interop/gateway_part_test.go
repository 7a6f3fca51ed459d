package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/internal/testing/gwnet"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// The gateway group against the Linux host with real partitions (issue
// 21): two nvmetd-rbd gateways, each in a network namespace of its own
// (internal/testing/gwnet: veth pairs, a Ceph cluster of the test's own on
// 10.77.S.1, a partition is nftables rules inside a gateway's namespace),
// serve one subsystem with two namespaces in two ANA groups: nsid 1 (ANA
// group 1, preferred gw-a) and nsid 2 (ANA group 2, preferred gw-b), one
// RBD image each. The guest reaches this machine's loopback only (slirp:
// 10.0.2.2:P is 127.0.0.1:P), so each gateway's port is forwarded there
// from the test process (gwnet.Forward: a plain byte-stream relay, which
// MPA allows; a partition stays real, since the cut is between the
// gateway's namespace and the cluster, not on the host's path). The guest's
// stock Linux host connects to both gateways (native multipath: one disk
// per namespace) and runs the verified workload (vwriter, O_DIRECT,
// versioned blocks) on each namespace at once:
//
//  1. the owner of group 1 (gw-a) is cut from Ceph, not from the host,
//     with writes in flight: it steps down, gw-b fences it and takes
//     group 1 (it holds both), the host's I/O of nsid 1 moves to gw-b;
//  2. after three leases the partition heals: gw-a finds its clients of
//     group 1 fenced and, as group 1's preferred owner, takes it back by
//     a fenced failback (it fences gw-b's client of group 1): no write
//     completes through gw-a between the heal and its acquisition, and
//     the failback happens under load on both groups: gw-b, the holder of
//     group 2, is not fenced on it (it keeps group 2, whose I/O never
//     fails).
//  3. (and 4., described where they run) a backend-only blocklist; a
//     failback that needs a host;
//  5. gw-a is cut from the image's OSDs but not from the group objects'
//     OSD (its renewals succeed), writes in flight: it steps down for
//     its backend's failures, gw-b fences it and takes group 1, gw-a
//     answers its stuck commands early with ANA Inaccessible (0x302),
//     which Linux requeues on gw-b's path (gateway_osdcut_test.go).
//
// At the end each vwriter sweeps its whole disk: 0 regressed blocks. The
// stalls (vwriter's gaps) are logged against lease + fence + 2 × KATO.
// The test network and its cluster (three OSDs, for phase 5: phases 1
// and 4 cut the owner from every daemon) are made once for both kernels
// (partNet) and removed by TestMain.

const gatewayPartNQN = "nqn.2024-01.io.nvmetd.interop:gateway-part"

// partNet is the test network of the partition tests, made on first use
// and removed by TestMain (closePartNet).
var partNet struct {
	once sync.Once
	net  *gwnet.Network
	err  error
	skip string
}

func partNetwork(t *testing.T) *gwnet.Network {
	t.Helper()
	partNet.once.Do(func() {
		if partNet.skip = gwnet.Unavailable(); partNet.skip != "" {
			return
		}
		t0 := time.Now()
		partNet.net, partNet.err = gwnet.Start([]string{"NVMETD_CEPH_OSDS=3"})
		t.Logf("the partition tests' network and cluster (three OSDs, made once for every kernel) took %.1fs", time.Since(t0).Seconds())
	})
	if partNet.skip != "" {
		t.Skip(partNet.skip)
	}
	if partNet.err != nil {
		t.Fatalf("the partition tests' network and cluster: %v", partNet.err)
	}
	return partNet.net
}

// closePartNet removes the partition tests' network and cluster, if made.
func closePartNet() error {
	if partNet.net == nil {
		return nil
	}
	return partNet.net.Close()
}

// partConfig is a gateway's configuration: two ANA groups, one namespace
// each.
func (p *gwProc) partConfig(c *cephtest.Cluster, images [2]string, group string, cmin int) string {
	return fmt.Sprintf(`daemon: {control_socket: %[1]s, log_level: info, log_format: console}
gateway:
  name: %[2]s
  group: %[3]s
  cluster: {ceph_conf: %[4]s, client_id: %[5]s, keyring: %[6]s, pool: %[7]s}
  lease: 5s
  renew_interval: 1s
  step_down_margin: 2s
  failback_delay: 3s
  ana_groups: [{id: 1, preferred: gw-a}, {id: 2, preferred: gw-b}]
  group_config: file
ports:
  - {id: 1, address: %[8]s, service_id: %[9]d, subsystems: [%[10]s]}
subsystems:
  - nqn: %[10]s
    allow_any_host: true
    model: nvmetd gateway interop
    cntlid_min: %[11]d
    cntlid_max: %[12]d
    namespaces:
      - nsid: 1
        ana_group: 1
        backend: {kind: rbd, pool: %[7]s, image: %[13]s, ceph_conf: %[4]s, client_id: %[5]s, keyring: %[6]s, op_timeout: 5s}
      - nsid: 2
        ana_group: 2
        backend: {kind: rbd, pool: %[7]s, image: %[14]s, ceph_conf: %[4]s, client_id: %[5]s, keyring: %[6]s, op_timeout: 5s}
`, filepath.Join(p.dir, "ctl.sock"), p.name, group, c.Conf, c.ClientID, c.Keyring, c.Pool, p.listenAddr(), p.port, gatewayPartNQN,
		cmin, cmin+999, images[0], images[1])
}

// nsBytes polls the gateways' status (control sockets) every 20 ms and
// keeps, per gateway and namespace, the bytes its successful reads and
// writes moved (target.IOCounters: a failed command moves none), to
// count what completed through a gateway in an interval.
type nsBytes struct {
	done, exited chan struct{}
	mu           sync.Mutex
	samples      []nsSample
}

type nsSample struct {
	at time.Time
	by [2]map[uint32]int64 // gateway → nsid → bytes (nil: no answer)
}

func startNSBytes(dirs ...string) *nsBytes {
	s := &nsBytes{done: make(chan struct{}), exited: make(chan struct{})}
	var clients []*http.Client
	for _, d := range dirs {
		sock := filepath.Join(d, "ctl.sock")
		clients = append(clients, &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}})
	}
	get := func(c *http.Client) map[uint32]int64 {
		resp, err := c.Get("http://nvmetd/v1/status")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var st struct {
			Target struct {
				Subsystems []struct {
					Namespaces []struct {
						NSID uint32 `json:"nsid"`
						IO   struct {
							R uint64 `json:"read_bytes"`
							W uint64 `json:"write_bytes"`
						} `json:"io"`
					} `json:"namespaces"`
				} `json:"subsystems"`
			} `json:"target"`
		}
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return nil
		}
		m := map[uint32]int64{}
		for _, sub := range st.Target.Subsystems {
			for _, ns := range sub.Namespaces {
				m[ns.NSID] += int64(ns.IO.R + ns.IO.W)
			}
		}
		return m
	}
	go func() {
		defer close(s.exited)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tk.C:
			}
			x := nsSample{at: time.Now()}
			for i, c := range clients {
				x.by[i] = get(c)
			}
			s.mu.Lock()
			s.samples = append(s.samples, x)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *nsBytes) stop() {
	close(s.done)
	<-s.exited
}

// at returns gateway gw's bytes of nsid at the last answer at or before
// t, or at the first after t if after is set (-1: none).
func (s *nsBytes) at(gw int, nsid uint32, t time.Time, after bool) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := int64(-1)
	for _, x := range s.samples {
		if x.by[gw] == nil {
			continue
		}
		if after && !x.at.Before(t) {
			return x.by[gw][nsid]
		}
		if !after && x.at.After(t) {
			break
		}
		v = x.by[gw][nsid]
	}
	return v
}

// waitMoved waits until gateway gw moved n more bytes of nsid than when
// called.
func (s *nsBytes) waitMoved(t *testing.T, gw int, nsid uint32, n int64, what string) {
	t.Helper()
	base := s.at(gw, nsid, time.Now(), false)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if v := s.at(gw, nsid, time.Now(), false); v >= 0 && v >= max(base, 0)+n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-%c did not move %d more bytes of namespace %d %s", 'a'+gw, n, nsid, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testLinuxHostGatewayPartition(t *testing.T, k kernel) {
	start := time.Now()
	// The VM first: where the lab cannot run, the test skips before it
	// starts a cluster.
	vm := startHealthyVM(t, k)
	nw := partNetwork(t)
	c := nw.Cluster
	// The group's name and namespace 1's image are placed for phase 5
	// (gateway_osdcut_test.go).
	group, image1, keep := osdCutSetup(t, c, 32<<20)
	images := [2]string{image1, c.CreateImage(t, 32<<20)}
	t0 := time.Now()
	bin := buildGatewayBinary(t)
	t.Logf("nvmetd-rbd built in %.1fs", time.Since(t0).Seconds())
	dir := t.TempDir()
	var procs [2]*gwProc
	var nss [2]*gwnet.Netns
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		nss[i] = nw.NewNetns(t, i)
		p := &gwProc{t: t, name: name, bin: bin, dir: d, port: freeTCPPort(t), log: filepath.Join(d, "nvmetd.log"),
			netns: nss[i].Name, listen: nss[i].Addr}
		procs[i] = p
		if err := os.WriteFile(filepath.Join(d, "nvmetd.yaml"), []byte(p.partConfig(c, images, group, 1+1000*i)), 0o644); err != nil {
			t.Fatal(err)
		}
		// The guest's 10.0.2.2:port is this machine's 127.0.0.1:port.
		gwnet.Forward(t, fmt.Sprintf("127.0.0.1:%d", p.port), net.JoinHostPort(p.listen, fmt.Sprint(p.port)))
	}
	a, b := procs[0], procs[1]
	defer func() {
		// Heal before the processes stop, should the test end early.
		for _, n := range nss {
			if n.IsCut() {
				n.Heal()
			}
		}
		for _, p := range procs {
			p.stop(syscall.SIGTERM)
			if t.Failed() {
				logTail(t, p.name, p.log)
			}
		}
	}()
	a.start()
	b.start()
	a.waitLog(`group 1: set-ana optimized`)
	b.waitLog(`group 2: set-ana optimized`)
	t.Logf("network 10.77.%d.0/24, cluster at %s, gw-a at %s (%s), gw-b at %s (%s); set up in %.1fs",
		nw.Subnet, nw.CephAddr(), a.listen, a.netns, b.listen, b.netns, time.Since(start).Seconds())

	addr := vm.HostAddr()
	defer stopWorkersAndDisconnect(vm, gatewayPartNQN, "gp1", "gp2")
	mark0 := kmsgMark(t, vm)
	step(t, vm, time.Minute, "rm -f /root/gp1.* /root/gp2.*")
	ports := make([]int, 0, len(procs))
	for _, p := range procs {
		ports = append(ports, p.port)
	}
	ctrlOf := connectPaths(t, vm, gatewayPartNQN, addr, ports)
	// anaState waits until gateway p's path of nsid reports want.
	anaState := func(p *gwProc, nsid int, want string) {
		t.Helper()
		step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=; for d in /sys/class/nvme/%s/nvme*c*n*; do [ "$(cat $d/nsid 2>/dev/null)" = %d ] && s=$(cat $d/ana_state); done; `+
			`[ "$s" = %s ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`, ctrlOf[p.port], nsid, want))
	}
	anaState(a, 1, "optimized")
	anaState(b, 1, "inaccessible")
	anaState(b, 2, "optimized")
	anaState(a, 2, "inaccessible")
	devOf := func(nsid int) string {
		return strings.TrimSpace(step(t, vm, time.Minute, fmt.Sprintf(
			`for i in $(seq 1 100); do for b in /sys/block/nvme*n*; do `+
				`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = %d ] && [ -b /dev/$(basename $b) ] && [ "$(cat $b/size)" -gt 0 ] && basename $b && exit 0; done; sleep 0.1; done; exit 1`, gatewayPartNQN, nsid)))
	}
	dev1, dev2 := devOf(1), devOf(2)
	step(t, vm, time.Minute, "nvme list-subsys /dev/"+dev1)

	phases := time.Now()
	moved := startNSBytes(a.dir, b.dir)
	defer moved.stop()
	vw1 := startLinuxWriter(t, vm, dev1, "gp1")
	vw2 := startLinuxWriter(t, vm, dev2, "gp2")
	vw1.waitWrites(200, "through gw-a before the cut")
	vw2.waitWrites(200, "through gw-b before the cut")
	moved.waitMoved(t, 0, 1, 200*4096, "before the cut")
	events := map[string]time.Time{}

	// 1. gw-a, group 1's owner, cut from the cluster (not from the host)
	// with writes in flight.
	amark, bmark := a.logSize(), b.logSize()
	cutAt := time.Now()
	events["cut gw-a from Ceph"] = cutAt
	nss[0].Cut(nw.CephAddr())
	t.Logf("gw-a cut from the cluster (%s, in namespace %s) at %s", nw.CephAddr(), nss[0].Name, cutAt.Format("15:04:05.000"))
	a.waitLogFrom(`stepped down from group[^\n]*"group": 1`, amark)
	b.waitLogFrom(`(?s)fencing the previous holder.*group 1: set-ana optimized`, bmark)
	anaState(b, 1, "optimized")
	moved.waitMoved(t, 1, 1, 200*4096, "after gw-b took group 1")
	vw1.waitWrites(200, "through gw-b while gw-a is cut")
	blog := b.logSince(bmark)
	iFence, iOpt := strings.Index(blog, "fencing the previous holder"), strings.Index(blog, "group 1: set-ana optimized")
	if iFence < 0 || iFence > iOpt {
		t.Fatalf("gw-b's log: fence at %d, optimized at %d: the fence must come first:\n%s", iFence, iOpt, blog)
	}
	var fence time.Duration
	if fenceAt, ok := gwLogTime(blog, `fencing the previous holder`); ok {
		if optAt, ok := gwLogTime(blog, `group 1: set-ana optimized`); ok {
			fence = optAt.Sub(fenceAt)
			t.Logf("gw-b fenced gw-a at +%v and went optimized for group 1 at +%v after the cut",
				fenceAt.Sub(cutAt).Round(time.Millisecond), optAt.Sub(cutAt).Round(time.Millisecond))
		}
	}
	t.Logf("gw-a while cut:\n%s", grepLog(a.logSince(amark), "step|set-ana|unavailable|renew|fenced"))

	// The partition lasts three leases in all (the scenario's length, not
	// a bound) while the host writes through gw-b.
	if d := time.Until(cutAt.Add(3 * gatewayLease)); d > 0 {
		time.Sleep(d)
	}

	// 2. Heal: gw-a takes group 1 back by a fenced failback, under load
	// on both groups.
	amark, bmark = a.logSize(), b.logSize()
	healAt := time.Now()
	events["heal gw-a's cut"] = healAt
	dropped := nss[0].Heal()
	t.Logf("partition healed at %s, %v after the cut (the drop rules: %s)", healAt.Format("15:04:05.000"), healAt.Sub(cutAt).Round(time.Millisecond), dropped)
	a.waitLogFrom(`(?s)group 1: acquire[^\n]*: done.*group 1: set-ana optimized`, amark)
	alog := a.logSince(amark)
	t.Logf("gw-a after the heal:\n%s", grepLog(alog, "fenc|step|set-ana|reopen|acquire"))
	if !strings.Contains(alog, "fencing the previous holder") {
		t.Errorf("gw-a took group 1 back without fencing gw-b's client of the group")
	}
	backAt, ok := gwLogTime(alog, `group 1: acquire[^:]*: done`)
	if !ok {
		t.Fatalf("gw-a's log has no time stamp of its acquisition of group 1:\n%s", alog)
	}
	events["gw-a takes group 1 back"] = backAt
	anaState(a, 1, "optimized")
	anaState(b, 1, "inaccessible")
	moved.waitMoved(t, 0, 1, 200*4096, "after gw-a took group 1 back")
	// Zero completions through the old owner between the heal and its
	// fenced failback (samples of its counters: the last one before the
	// heal, the first after its acquisition's time stamp, which its log
	// writes after the acquisition is done; the namespace's I/O before it
	// had to wait for the acquisition).
	if v0, v1 := moved.at(0, 1, healAt, false), moved.at(0, 1, backAt, false); v0 < 0 || v1 < 0 {
		t.Errorf("no status sample of gw-a around the heal (%d, %d)", v0, v1)
	} else if v1 != v0 {
		t.Errorf("FINDING: %d bytes of namespace 1 moved through gw-a between the heal and its acquisition of group 1: two writers", v1-v0)
	} else {
		t.Logf("no I/O of namespace 1 completed through gw-a between the heal (%s) and its acquisition of group 1 (%s)",
			healAt.Format("15:04:05.000"), backAt.Format("15:04:05.000"))
	}
	vw1.waitWrites(200, "through gw-a after the failback")
	// Group 2 goes on through gw-b, which was not fenced on it.
	moved.waitMoved(t, 1, 2, 200*4096, "after group 1's failback")
	vw2.waitWrites(200, "through gw-b after group 1's failback")
	blog = b.logSince(bmark)
	if strings.Contains(blog, "fenced by another") || regexp.MustCompile(`stepped down from group[^\n]*"group": 2`).MatchString(blog) {
		t.Errorf("FINDING: gw-b lost group 2 during group 1's failback:\n%s", grepLog(blog, "fenc|step|set-ana|release"))
	}
	anaState(b, 2, "optimized")
	select {
	case <-b.exited:
		t.Errorf("FINDING: gw-b exited during group 1's failback")
	default:
	}
	t.Logf("gw-b during group 1's failback:\n%s", grepLog(blog, "fenc|step|set-ana|release"))

	// 3. A backend-only blocklist: an operator blocklists gw-a's image
	// client of group 1 alone (the addresses its holder record names;
	// its client of the group objects is untouched, so its renewals go
	// on) while the host writes through it. gw-a must see its backend
	// fenced and release the group, gw-b fence it and take the group, and
	// gw-a, the preferred owner, take it back after its backoff on a new
	// RADOS client; nothing completes through gw-a between its step-down
	// and that acquisition.
	vw1.waitWrites(100, "through gw-a before the blocklist")
	rec := holderRecord(t, c, group, 1)
	if rec.Name != "gw-a" || len(rec.Addrs) == 0 {
		t.Fatalf("group 1's record: %+v, want gw-a's with its image clients", rec)
	}
	var addrs []string
	for _, v := range rec.Addrs {
		addrs = append(addrs, gateway.SplitAddrs(v)...)
	}
	amark, bmark = a.logSize(), b.logSize()
	blAt := time.Now()
	events["blocklist gw-a's image client"] = blAt
	for _, addr := range addrs {
		cephAdmin(t, c, "ceph", "osd", "blocklist", "add", addr)
	}
	t.Logf("blocklisted gw-a's image client of group 1 %v (not its client of the group objects)", addrs)
	a.waitLogFrom(`stepped down from group[^\n]*EBLOCKLISTED`, amark)
	b.waitLogFrom(`(?s)fencing the previous holder.*group 1: set-ana optimized`, bmark)
	fence = max(fence, fenceSpan(t, b.logSince(bmark), blAt, "gw-b", "the blocklist"))
	anaState(b, 1, "optimized")
	moved.waitMoved(t, 1, 1, 100*4096, "after gw-b took group 1 from the blocklisted gw-a")
	a.waitLogFrom(`(?s)group 1: acquire \(reopen\): done.*group 1: set-ana optimized`, amark)
	alog = a.logSince(amark)
	t.Logf("gw-a after the blocklist:\n%s", grepLog(alog, "stepped down|release|reopen|fenc|set-ana|acquire"))
	downAt, ok1 := gwLogTime(alog, `stepped down from group`)
	backAt, ok2 := gwLogTime(alog, `group 1: acquire \(reopen\): done`)
	if !ok1 || !ok2 {
		t.Fatalf("gw-a's log: no time stamp of its step-down or its acquisition:\n%s", alog)
	}
	events["gw-a takes group 1 back after the blocklist"] = backAt
	if v0, v1 := moved.at(0, 1, downAt, true), moved.at(0, 1, backAt, false); v0 >= 0 && v1 >= 0 && v1 != v0 {
		t.Errorf("FINDING: %d bytes of namespace 1 moved through gw-a between its step-down (blocklisted) and its new acquisition: two writers", v1-v0)
	}
	anaState(a, 1, "optimized")
	moved.waitMoved(t, 0, 1, 100*4096, "after gw-a took group 1 back on a new client")
	if r := holderRecord(t, c, group, 1); r.Name != "gw-a" || slices.Equal(r.Addrs, rec.Addrs) {
		t.Errorf("group 1's record after gw-a took it back: %+v, want gw-a's with a new image client (the old: %v)", r, rec.Addrs)
	}
	vw1.waitWrites(100, "through gw-a after the blocklist")

	// 4. Failback needs a host: gw-a is cut from Ceph once more (the host
	// still connected to both: gw-b fences it and takes group 1), then
	// the host disconnects from gw-a, then the partition heals. gw-a, the
	// preferred owner, must not ask for the group, well past its failback
	// delay, and say why (no host); once the host connects to it again,
	// the failback happens (gw-b releases gracefully, gw-a fences gw-b's
	// client of the group first). (The host disconnects only after gw-b
	// took the group: a host whose only path is the new owner's loses the
	// namespace when the new owner reopens it at the takeover; see the
	// finding in docs/rbd.md.)
	bmark = b.logSize()
	cut2At := time.Now()
	events["cut gw-a from Ceph again"] = cut2At
	nss[0].Cut(nw.CephAddr())
	b.waitLogFrom(`(?s)fencing the previous holder.*group 1: set-ana optimized`, bmark)
	fence = max(fence, fenceSpan(t, b.logSince(bmark), cut2At, "gw-b", "the second cut"))
	anaState(b, 1, "optimized")
	moved.waitMoved(t, 1, 1, 100*4096, "after gw-b took group 1 from gw-a, cut again")
	events["disconnect the host from gw-a"] = time.Now()
	step(t, vm, time.Minute, "nvme disconnect -d "+ctrlOf[a.port])
	amark = a.logSize()
	aStart := time.Now()
	events["heal gw-a's second cut (no host)"] = aStart
	t.Logf("second partition healed (the drop rules: %s)", nss[0].Heal())
	// Well past the failback delay (3s) and two leases: gw-a waits for a
	// host, and says so.
	var st partGroupStatus
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		st = partStatus(t, a, 1)
		if st.Owned {
			t.Fatalf("FINDING: gw-a took group 1 back %v after the heal with no host connected to it", time.Since(aStart).Round(time.Millisecond))
		}
		if time.Since(aStart) > 3*time.Second+2*gatewayLease && strings.Contains(st.FailbackWait, "no host") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-a: group 1: no failback wait for a host within 5 minutes of the heal: %+v", st)
		}
	}
	t.Logf("gw-a, %v after the heal with no host connected: group 1 %+v", time.Since(aStart).Round(time.Millisecond), st)
	if strings.Contains(b.logSince(bmark), "release to gw-a") {
		t.Errorf("FINDING: gw-b handed group 1 over to gw-a, which no host is connected to")
	}
	moved.waitMoved(t, 1, 1, 100*4096, "while gw-a waits for a host")
	bmark = b.logSize()
	connAt := time.Now()
	events["the host connects to gw-a"] = connAt
	step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 2 -c 1 -l 600", addr, a.port, gatewayPartNQN))
	ctrlOf[a.port] = strings.TrimSpace(step(t, vm, time.Minute, fmt.Sprintf(`for i in $(seq 1 100); do for c in /sys/class/nvme/nvme*; do `+
		`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && case "$(cat $c/address)" in *trsvcid=%d*) basename $c; exit 0;; esac; done; sleep 0.1; done; exit 1`,
		gatewayPartNQN, a.port)))
	anaState(a, 1, "optimized")
	b.waitLogFrom(`group 1: release to gw-a: done`, bmark)
	alog = a.logSince(amark)
	if i, j := strings.Index(alog, "fencing the previous holder"), strings.LastIndex(alog, "group 1: set-ana optimized"); i < 0 || i > j {
		t.Errorf("gw-a did not fence gw-b's client of group 1 before serving it:\n%s", grepLog(alog, "fenc|set-ana|acquire"))
	}
	moved.waitMoved(t, 0, 1, 100*4096, "after the failback once the host connected to gw-a")
	vw1.waitWrites(100, "through gw-a after the host connected to it")
	vw2.waitWrites(100, "through gw-b at the end")

	// 5. gw-a cut from the image's OSDs, not from the group's
	// (gateway_osdcut_test.go).
	fence = max(fence, linuxHostOSDCut(t, osdCut{nw: nw, a: a, b: b, nsA: nss[0], keep: keep, image: images[0], size: 32 << 20, moved: moved, vw: vw1, anaState: anaState, events: events}))

	// Both writers stop together, so that their sweeps run side by side.
	step(t, vm, time.Minute, "touch /root/gp1.stop /root/gp2.stop")
	dmesg := ""
	for i, vw := range []*linuxWriter{vw1, vw2} {
		sum, off := vw.stop()
		if dmesg == "" {
			dmesg = dmesgSince(t, vm, mark0)
		}
		t.Logf("namespace %d:", i+1)
		checkLinuxSweep(t, sum, dmesg)
		logLinuxStalls(t, sum, off, events, gatewayLease+fence+2*linuxKATO,
			fmt.Sprintf("lease %v + fence %v (gw-b's fence to optimized) + 2 × KATO %v", gatewayLease, fence.Round(time.Millisecond), linuxKATO))
	}
	var nvmeLines []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "nvme") {
			nvmeLines = append(nvmeLines, l)
		}
	}
	t.Logf("kernel log (nvme):\n%s", strings.Join(nvmeLines, "\n"))
	step(t, vm, time.Minute, "nvme disconnect -n "+gatewayPartNQN)
	t.Logf("LinuxHostGatewayPartition on Linux %s took %.1fs, of which %.1fs from the writers' start to the end", k, time.Since(start).Seconds(), time.Since(phases).Seconds())
}

// grepLog returns the lines of log that match re.
func grepLog(log, re string) string {
	rx := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if rx.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// fenceSpan returns the time from the fencer's "fencing the previous
// holder" to its "group 1: set-ana optimized" in log (its log since the
// event at), and logs both against the event.
func fenceSpan(t *testing.T, log string, at time.Time, who, event string) time.Duration {
	t.Helper()
	fenceAt, ok1 := gwLogTime(log, `fencing the previous holder`)
	optAt, ok2 := gwLogTime(log, `group 1: set-ana optimized`)
	if !ok1 || !ok2 {
		return 0
	}
	t.Logf("%s fenced at +%v and went optimized for group 1 at +%v after %s", who,
		fenceAt.Sub(at).Round(time.Millisecond), optAt.Sub(at).Round(time.Millisecond), event)
	return optAt.Sub(fenceAt)
}

// cephAdmin runs a Ceph tool (ceph, rados) as client.admin on c.
func cephAdmin(t *testing.T, c *cephtest.Cluster, tool string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, append([]string{"--conf", c.Conf, "--name", "client.admin", "--keyring", c.AdminKeyring}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", tool, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// holderRecord reads the record of ANA group id of gateway group group
// (the omap value "holder" of its object).
func holderRecord(t *testing.T, c *cephtest.Cluster, group string, id uint32) gateway.Record {
	t.Helper()
	f := filepath.Join(t.TempDir(), "holder.json")
	cephAdmin(t, c, "rados", "-p", c.Pool, "getomapval", gateway.ObjectName(group, id), "holder", f)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var r gateway.Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the holder record %q: %v", b, err)
	}
	return r
}

// partGroupStatus is an ANA group in a gateway's status.
type partGroupStatus struct {
	ID           uint32 `json:"id"`
	Owned        bool   `json:"owned"`
	Holder       string `json:"holder"`
	FailbackWait string `json:"failback_wait"`
}

// partStatus returns ANA group id in gateway p's status (its control
// socket).
func partStatus(t *testing.T, p *gwProc, id uint32) partGroupStatus {
	t.Helper()
	sock := filepath.Join(p.dir, "ctl.sock")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://nvmetd/v1/status")
	if err != nil {
		t.Fatalf("%s status: %v", p.name, err)
	}
	defer resp.Body.Close()
	var st struct {
		Gateway *struct {
			Groups []partGroupStatus `json:"ana_groups"`
		} `json:"gateway"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s status: %v", p.name, err)
	}
	if st.Gateway != nil {
		for _, g := range st.Gateway.Groups {
			if g.ID == id {
				return g
			}
		}
	}
	return partGroupStatus{ID: id, FailbackWait: "(not a member of the group yet)"}
}
