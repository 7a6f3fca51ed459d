package interop_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/faultinject"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// The gateway group against the Linux host (issue 16, issue 21): two
// nvmetd-rbd gateways on this machine serve one subsystem with one RBD
// image namespace (ANA group 1, preferred owner gw-a; CNTLIDs 1-1000 and
// 1001-2000) from the test's Ceph cluster (test/ceph/cephtest). The
// guest's stock Linux host connects to both (native multipath: one
// /dev/nvmeXnY), gw-a's path optimized and gw-b's inaccessible; the
// verified workload (vwriter: versioned blocks with O_DIRECT, the last
// acknowledged sequence per block recorded) runs on the multipath disk
// while gw-a, the owner, is SIGKILLed (gw-b fences it and takes the group:
// its path goes optimized and the I/O moves there), restarted (failback:
// gw-b hands the group over, the I/O comes back; its first step-downs are
// refused by the test build's fault injector, gateway_anafail_test.go),
// killed again and restarted with gw-b's step-down refused for good (gw-b
// exits 75 unreleased, gw-a fences it after its lease and serves; gw-b is
// restarted),
// and frozen (SIGSTOP) for three leases (gw-b fences it and takes the
// group; resumed, gw-a finds itself fenced). At the end vwriter sweeps the whole disk: 0 regressed
// blocks (no write the host gave up on, or of a fenced gateway, landed
// after a newer acknowledged one), and no I/O error. The stalls of the
// host's I/O (vwriter's gaps) are logged against lease + fence + 2 × KATO,
// and the moves between the gateways (20 ms samples of their I/O
// counters) are printed.

const gatewayNQN = "nqn.2024-01.io.nvmetd.interop:gateway"

// gwProc is one gateway process.
type gwProc struct {
	t      *testing.T
	name   string
	bin    string
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
	// netns, if set, is the network namespace (ip netns name) the
	// process runs in, and listen the address its port listens on there
	// (default 127.0.0.1).
	netns, listen string
	// advertise, if set, is the address the other gateway's discovery
	// log gives hosts for this one's port (gateway.advertise).
	advertise string
	// groupConfig is gateway.group_config ("" file: groupConfigLine).
	groupConfig string
	// env is added to the process's environment (NAME=value).
	env []string
}

func (p *gwProc) listenAddr() string {
	if p.listen == "" {
		return "127.0.0.1"
	}
	return p.listen
}

func (p *gwProc) config(c *cephtest.Cluster, image, group string, cmin int) string {
	return fmt.Sprintf(`daemon: {control_socket: %s, log_level: info, log_format: console}
gateway:
  name: %s
  group: %s
  cluster: {ceph_conf: %s, client_id: %s, keyring: %s, pool: %s}
  lease: 5s
  renew_interval: 1s
  step_down_margin: 2s
  failback_delay: 3s
  ana_groups: [{id: 1, preferred: gw-a}]
%s%sports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    model: nvmetd gateway interop
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
      - nsid: 1
        ana_group: 1
        backend: {kind: rbd, pool: %s, image: %s, ceph_conf: %s, client_id: %s, keyring: %s}
`, filepath.Join(p.dir, "ctl.sock"), p.name, group, c.Conf, c.ClientID, c.Keyring, c.Pool, groupConfigLine(p.groupConfig), advertiseLine(p.advertise), p.port, gatewayNQN,
		gatewayNQN, cmin, cmin+999, c.Pool, image, c.Conf, c.ClientID, c.Keyring)
}

// groupConfigLine is the gateway section's group_config line: mode, or
// "file" where the test gives none (and rebalance: off). These phases were written for the
// file-held configuration (the guard phase's SIGHUP re-reads the file's
// subsystems); the product's default is rados.
func groupConfigLine(mode string) string {
	if mode == "" {
		mode = "file"
	}
	// rebalance: off: these phases place their group on gw-a on purpose
	// and check its failback there; an automatic rebalance after a
	// restart slower than the hold-down would move it (docs/rbd.md
	// "Rebalancing"; gateway.TestGatewayProcessRebalance covers it).
	return "  group_config: " + mode + "\n  rebalance: off\n"
}

// advertiseLine is the gateway section's advertise line for port 1 ("" none).
func advertiseLine(addr string) string {
	if addr == "" {
		return ""
	}
	return "  advertise: [{port_id: 1, address: " + addr + "}]\n"
}

func (p *gwProc) start() {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	if p.netns != "" {
		// nsenter execs the gateway: the process is the gateway itself
		// (signals reach it).
		p.cmd = exec.Command("nsenter", "--net=/run/netns/"+p.netns, "--", p.bin, "--config", filepath.Join(p.dir, "nvmetd.yaml"))
	} else {
		p.cmd = exec.Command(p.bin, "--config", filepath.Join(p.dir, "nvmetd.yaml"))
	}
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}, p.env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	cmd := p.cmd
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(p.listenAddr(), strconv.Itoa(p.port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited:\n%s", p.name, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %d", p.name, p.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *gwProc) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// waitLog waits until the process's log file matches re.
func (p *gwProc) waitLog(re string) {
	p.t.Helper()
	p.waitLogFrom(re, 0)
}

// waitLogFrom waits until the process's log file from byte from on
// (logSize's mark) matches re.
func (p *gwProc) waitLogFrom(re string, from int64) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(p.log)
		if int64(len(b)) >= from {
			b = b[from:]
		}
		if rx.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no log line matching %q:\n%s", p.name, re, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buildGatewayBinary builds nvmetd with the rbd backend (cgo; the cluster
// script installed librbd-dev) and the extra build tags (faultinject: the
// test-only fault injector, gateway/gwtarget/faultinject.go, inert unless
// armed).
func buildGatewayBinary(t *testing.T, extraTags ...string) string {
	t.Helper()
	tags, err := exec.Command("make", "-s", "-C", "../..", "rbd-tags").Output()
	if err != nil {
		t.Fatalf("make rbd-tags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nvmetd-rbd")
	all := strings.Join(append([]string{strings.TrimSpace(string(tags))}, extraTags...), ",")
	cmd := exec.Command("go", "build", "-tags", all, "-o", bin, "github.com/nvmetd/nvmetd/cmd/nvmetd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nvmetd-rbd: %v\n%s", err, out)
	}
	return bin
}

func testLinuxHostGateway(t *testing.T, k kernel) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 256<<20)
	// The fault-injecting build (inert unless armed): the failback phase
	// refuses gw-b's step-downs (gateway_anafail_test.go).
	bin := buildGatewayBinary(t, faultinject.Tag)
	vm := startHealthyVM(t, k)
	procs := startGatewayPair(t, c, image, bin, "i", func(p *gwProc) {
		p.env = []string{faultinject.StepDownEnv + "=" + filepath.Join(p.dir, "stepdown.fault")}
	})
	a, b := procs[0], procs[1]
	addr := vm.HostAddr()
	defer stopWorkersAndDisconnect(vm, gatewayNQN, "gw")
	mark0 := kmsgMark(t, vm)
	step(t, vm, time.Minute, "rm -f /root/gw.*")
	ports := make([]int, 0, len(procs))
	for _, p := range procs {
		ports = append(ports, p.port)
	}
	ctrlOf := connectPaths(t, vm, gatewayNQN, addr, ports)
	anaState := func(port int, want string) {
		t.Helper()
		step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/nvme*c*n1/ana_state 2>/dev/null); [ "$s" = %s ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`, ctrlOf[port], want))
	}
	ctrlState := func(port int, want string) {
		t.Helper()
		step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/state); case " %s " in *" $s "*) echo $s; exit 0;; esac; sleep 0.1; done; echo $s; exit 1`, ctrlOf[port], want))
	}
	anaState(a.port, "optimized")
	anaState(b.port, "inaccessible")
	dev := strings.TrimSpace(step(t, vm, time.Minute, fmt.Sprintf(
		`for i in $(seq 1 100); do for b in /sys/block/nvme*n*; do `+
			`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = 1 ] && [ -b /dev/$(basename $b) ] && [ "$(cat $b/size)" -gt 0 ] && basename $b && exit 0; done; sleep 0.1; done; exit 1`, gatewayNQN)))
	step(t, vm, time.Minute, "nvme list-subsys /dev/"+dev)

	sampler := startIOSampler(a.dir, b.dir)
	vw := startLinuxWriter(t, vm, dev, "gw")
	sampler.waitProgress(t, 0, 500, "before the gateway is killed")
	vw.waitWrites(200, "before the gateway is killed")
	guardLinuxHost(t, vm, c, a, b, ctrlOf, vw, image)
	events := map[string]time.Time{}
	// fenceTime is gw-b's fence of gw-a, from its log since mark: from
	// "fencing the previous holder" to "group 1: set-ana optimized" (the
	// fence, the OSD-map barrier and the acquisition).
	fenceTime := func(mark int64) time.Duration {
		t.Helper()
		blog := b.logSince(mark)
		iFence, iOpt := strings.Index(blog, "fencing the previous holder"), strings.Index(blog, "group 1: set-ana optimized")
		if iFence < 0 || iFence > iOpt {
			t.Fatalf("gw-b's log: fence at %d, optimized at %d: the fence must come first:\n%s", iFence, iOpt, blog)
		}
		fenceAt, ok1 := gwLogTime(blog, `fencing the previous holder`)
		optAt, ok2 := gwLogTime(blog, `group 1: set-ana optimized`)
		if !ok1 || !ok2 {
			return 0
		}
		return optAt.Sub(fenceAt)
	}

	// gw-a, the owner, is SIGKILLed: gw-b fences it and takes the group.
	mark := b.logSize()
	events["kill gw-a"] = time.Now()
	a.stop(syscall.SIGKILL)
	ctrlState(a.port, "resetting connecting")
	anaState(b.port, "optimized")
	sampler.waitProgress(t, 1, 500, "after gw-b took the group")
	b.waitLog(`(?s)fencing the previous holder.*group 1: set-ana optimized`)
	fences := []time.Duration{fenceTime(mark)}

	// gw-a restarted: failback, while gw-b's step-down is refused.
	af := anaFailGW{vm: vm, a: a, b: b, ctrlOf: ctrlOf, sampler: sampler, vw: vw, events: events}
	anaFailFailback(t, af)
	// Again, with gw-b's step-down refused for good: gw-b exits 75, gw-a
	// fences it after its lease; gw-b is restarted.
	fences = append(fences, anaFailExit(t, af))

	// gw-a, the owner again, is frozen (SIGSTOP) for three leases while
	// the host writes, as the Go host's TestGatewayProcessFreeze does:
	// gw-b fences it and takes the group; the host's I/O, stuck on gw-a's
	// path, moves to gw-b once its keep-alive timeout ends that path.
	mark = b.logSize()
	frozen := time.Now()
	events["freeze gw-a"] = frozen
	a.signal(syscall.SIGSTOP)
	anaState(b.port, "optimized")
	sampler.waitProgress(t, 1, 500, "while gw-a is frozen")
	b.waitLog(`(?s)fencing the previous holder.*group 1: set-ana optimized`)
	fences = append(fences, fenceTime(mark))
	if d := time.Until(frozen.Add(3 * gatewayLease)); d > 0 {
		time.Sleep(d) // the freeze lasts three leases (not an assertion)
	}
	// Resumed, gw-a must do no I/O for the host before it has checked its
	// lease (its serving deadline passed): it steps down, and as the
	// preferred owner takes its group back by a fenced failback; or, if
	// its client was fenced, it exits, and is restarted as its service
	// manager would.
	resumed := time.Now()
	events["resume gw-a"] = resumed
	a.signal(syscall.SIGCONT)
	base := sampler.last()[0]
resume:
	for deadline := time.Now().Add(3 * time.Minute); ; {
		select {
		case <-a.exited:
			t.Logf("gw-a exited after its resume (fenced); restarting it")
			a.cmd = nil
			events["restart gw-a after the freeze"] = time.Now()
			a.start()
			ctrlState(a.port, "live")
			sampler.waitProgress(t, 0, 500, "after gw-a's restart")
			break resume
		default:
		}
		if now := sampler.last()[0]; now >= 0 && now >= base+500 {
			t.Logf("gw-a carries the host's I/O again (failback) %.1fs after its resume", time.Since(resumed).Seconds())
			break resume
		}
		if time.Now().After(deadline) {
			t.Logf("gw-a did not take its group back within 3 minutes of its resume; group 1 stays with gw-b")
			sampler.waitProgress(t, 1, 500, "after gw-a's resume")
			break resume
		}
		time.Sleep(100 * time.Millisecond)
	}
	vw.waitWrites(200, "after gw-a's resume")
	fences = append(fences, singlePathTakeover(t, singlePathGW{vm: vm, procs: procs, ctrlOf: ctrlOf, dev: dev, sampler: sampler, vw: vw, events: events}))

	sum, off := vw.stop()
	reportKernelFailovers(t, sampler.stop(), events)
	dmesg := dmesgSince(t, vm, mark0)
	checkLinuxSweep(t, sum, dmesg)
	var fence time.Duration
	for _, f := range fences {
		fence = max(fence, f)
	}
	logLinuxStalls(t, sum, off, events, gatewayLease+fence+2*linuxKATO,
		fmt.Sprintf("lease %v + fence %v (the longest fence to optimized) + 2 × KATO %v", gatewayLease, fence.Round(time.Millisecond), linuxKATO))
	var nvmeLines []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "nvme") {
			nvmeLines = append(nvmeLines, l)
		}
	}
	t.Logf("kernel log (nvme):\n%s", strings.Join(nvmeLines, "\n"))
	step(t, vm, time.Minute, "nvme disconnect -n "+gatewayNQN)
}

// The gateways' lease (gwProc.config) and the Linux host's keep-alive
// timeout (nvme connect's default, NVME_DEFAULT_KATO).
const (
	gatewayLease = 5 * time.Second
	linuxKATO    = 5 * time.Second
)

// signal sends sig to the process.
func (p *gwProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// logSize is the size of the process's log file (a mark for logSince).
func (p *gwProc) logSize() int64 {
	fi, err := os.Stat(p.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the process's log from mark on.
func (p *gwProc) logSince(mark int64) string {
	b, _ := os.ReadFile(p.log)
	if int64(len(b)) < mark {
		return string(b)
	}
	return string(b[mark:])
}

// gwLogTime returns the time stamp of the first line of log (a gateway's
// console log) that matches re.
func gwLogTime(log, re string) (time.Time, bool) {
	rx := regexp.MustCompile(re)
	for _, l := range strings.Split(log, "\n") {
		if !rx.MatchString(l) || len(l) < 23 {
			continue
		}
		if at, err := time.ParseInLocation("2006-01-02 15:04:05.000", l[:23], time.Local); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// startGatewayPair starts gw-a and gw-b of a new gateway group (name
// prefix groupPrefix and a random suffix) serving image with bin, gw-a
// first and owning group 1 before gw-b starts; setup, if not nil,
// completes each process before its configuration is written. Both are
// stopped (SIGTERM) at the end of the test, their logs' tails printed if
// it failed.
func startGatewayPair(t *testing.T, c *cephtest.Cluster, image, bin, groupPrefix string, setup func(p *gwProc)) [2]*gwProc {
	t.Helper()
	var rb [4]byte
	rand.Read(rb[:])
	group := groupPrefix + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	var procs [2]*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &gwProc{t: t, name: name, bin: bin, dir: d, port: freeTCPPort(t), log: filepath.Join(d, "nvmetd.log")}
		if setup != nil {
			setup(procs[i])
		}
		if err := os.WriteFile(filepath.Join(d, "nvmetd.yaml"), []byte(procs[i].config(c, image, group, 1+1000*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop(syscall.SIGTERM)
			if t.Failed() {
				logTail(t, p.name, p.log)
			}
		}
	})
	procs[0].start()
	procs[0].waitLog(`group 1: set-ana optimized`)
	procs[1].start()
	return procs
}
