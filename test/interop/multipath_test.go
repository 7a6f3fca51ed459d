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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The multipath interop test (issue 13) runs two nvmetd processes on this
// machine, serving one subsystem from one shared file with distinct
// CNTLID ranges, each on its own port. The guest's stock Linux host
// connects to both through 10.0.2.2 (native NVMe multipath: one
// /dev/nvmeXnY over two controllers), nvme list-subsys shows the two live
// paths with their ANA states, nvme ana-log decodes our ANA log page, and
// fio with crc32c verification runs on the multipath disk while (a) the
// ANA group of the process carrying the I/O goes inaccessible (reload) and
// back, (b) that process is SIGKILLed, (c) it comes back: no fio error,
// and the path's loss is in the kernel log. The failover times (the last I/O completed on the old path
// to the first on the new one, sampled from the paths' block statistics)
// are printed.

const mpathNQN = "nqn.2024-01.io.nvmetd.interop:multipath"

// mpathProc is one nvmetd process of the test.
type mpathProc struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	cmin   int
	img    string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func (p *mpathProc) config(state string) string {
	return fmt.Sprintf(`daemon: {control_socket: %s, log_level: info}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s], ana_groups: [{id: 1, state: %s}]}
subsystems:
  - nqn: %s
    allow_any_host: true
    model: nvmetd multipath interop
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
      - {nsid: 1, backend: {kind: file, path: %s, size: 256MiB, no_lock: true}}
`, filepath.Join(p.dir, "ctl.sock"), p.port, mpathNQN, state, mpathNQN, p.cmin, p.cmin+999, p.img)
}

func (p *mpathProc) writeConfig(state string) string {
	p.t.Helper()
	f := filepath.Join(p.dir, "nvmetd.yaml")
	if err := os.WriteFile(f, []byte(p.config(state)), 0o644); err != nil {
		p.t.Fatal(err)
	}
	return f
}

func (p *mpathProc) start(state string) {
	t := p.t
	t.Helper()
	cfg := p.writeConfig(state)
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--config", cfg)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(p.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("nvmetd exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmetd not listening on %d", p.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *mpathProc) stop(sig syscall.Signal) {
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

func (p *mpathProc) reload(state string) {
	p.t.Helper()
	p.writeConfig(state)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
}

func testLinuxHostMultipath(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	bin := hostBuild(t, "github.com/nvmetd/nvmetd/cmd/nvmetd", false)
	dir := t.TempDir()
	img := filepath.Join(dir, "shared.img")
	var procs [2]*mpathProc
	for i := range procs {
		d := filepath.Join(dir, fmt.Sprint("p", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &mpathProc{t: t, bin: bin, dir: d, port: freeTCPPort(t), cmin: 1 + 1000*i, img: img, log: filepath.Join(d, "nvmetd.log")}
	}
	procs[0].start("optimized")
	procs[1].start("optimized")
	defer func() {
		for _, p := range procs {
			p.stop(syscall.SIGTERM)
			if t.Failed() {
				logTail(t, fmt.Sprintf("nvmetd on %d", p.port), p.log)
			}
		}
	}()
	addr := vm.HostAddr()
	defer stopWorkersAndDisconnect(vm, mpathNQN, "mp")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, "cat /sys/module/nvme_core/parameters/multipath; rm -f /root/mp.*")
	ports := make([]int, 0, len(procs))
	for _, p := range procs {
		ports = append(ports, p.port)
	}
	ctrlOf := connectPaths(t, vm, mpathNQN, addr, ports)
	dev := mpathDevice(t, vm)
	out := step(t, vm, time.Minute, "nvme list-subsys /dev/"+dev)
	if strings.Count(out, " live") != 2 {
		t.Fatalf("nvme list-subsys does not show two live paths")
	}
	ana := step(t, vm, time.Minute, "nvme ana-log /dev/"+ctrlOf[procs[0].port])
	if !strings.Contains(ana, "optimized") {
		t.Fatalf("nvme ana-log did not decode a group state")
	}
	step(t, vm, time.Minute, fmt.Sprintf("cat /sys/class/nvme-subsystem/*/iopolicy; for c in %s %s; do for p in /sys/class/nvme/$c/nvme*c*n1; do echo $p $(cat $p/ana_grpid) $(cat $p/ana_state); done; done",
		ctrlOf[procs[0].port], ctrlOf[procs[1].port]))

	// The verified workload (vwriter) on the multipath disk; and, here, a
	// sampler of the I/O commands each nvmetd completed, every 20 ms (the
	// kernel keeps no statistics of a multipath disk's hidden path disks).
	sampler := startIOSampler(procs[0].dir, procs[1].dir)
	vw := startLinuxWriter(t, vm, dev, "mp")
	anaState := func(port int, want string) {
		t.Helper()
		step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/nvme*c*n1/ana_state 2>/dev/null); [ "$s" = %s ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`, ctrlOf[port], want))
	}
	ctrlState := func(port int, want string) {
		t.Helper()
		step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/state); case " %s " in *" $s "*) echo $s; exit 0;; esac; sleep 0.1; done; echo $s; exit 1`, ctrlOf[port], want))
	}
	// The numa policy sends the I/O to A (the first optimized path).
	sampler.waitProgress(t, 0, 500, "before the first event")
	vw.waitWrites(200, "before the first event")
	events := map[string]time.Time{}

	// (a) A's group inaccessible: the I/O moves to B; A optimized again:
	// it comes back to A (nvme_mpath_set_live recomputes the current path:
	// the first optimized one).
	events["a"] = time.Now()
	procs[0].reload("inaccessible")
	anaState(procs[0].port, "inaccessible")
	sampler.waitProgress(t, 1, 500, "while A's group is inaccessible")
	events["a'"] = time.Now()
	procs[0].reload("optimized")
	anaState(procs[0].port, "optimized")
	sampler.waitProgress(t, 0, 500, "after A's group came back")

	// (b) A, which carries the I/O again, is SIGKILLed: it moves to B;
	// (c) A comes back and its path reconnects. (No freeze here: these
	// two processes share a file without a lease or a fence, so a frozen
	// one's stale writes would land when it resumes: the gateway group's
	// test, LinuxHostGateway, freezes its owner.)
	events["b"] = time.Now()
	procs[0].stop(syscall.SIGKILL)
	ctrlState(procs[0].port, "resetting connecting")
	sampler.waitProgress(t, 1, 500, "while A is down")
	events["c"] = time.Now()
	procs[0].start("optimized")
	ctrlState(procs[0].port, "live")
	sampler.waitProgress(t, 0, 500, "after A came back")
	vw.waitWrites(200, "after A came back")

	sum, off := vw.stop()
	dmesg := dmesgSince(t, vm, mark)
	// Linux's own race at the SIGKILL (EIO, accepted only with its
	// signature in the kernel log; checkLinuxSweep): when the SIGKILLed
	// target's QP goes away while nvme_rdma_queue_rq posts a command,
	// siw's post_send fails with -ENOTCONN, which nvme-rdma maps to
	// BLK_STS_IOERR (only -EIO becomes a path error, since "nvme-rdma:
	// avoid IO error for nvme native multipath"), so native multipath
	// does not retry it on the other path and the application sees EIO.
	checkLinuxSweep(t, sum, dmesg)
	reportKernelFailovers(t, sampler.stop(), events)
	logLinuxStalls(t, sum, off, events, 0, "")
	var nvmeLines []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "nvme") {
			nvmeLines = append(nvmeLines, l)
		}
	}
	t.Logf("kernel log (nvme):\n%s", strings.Join(nvmeLines, "\n"))
	// (nvme_update_ana_state logs the ANA change at debug level only: the
	// guest's ana_state attribute showed it above.)
	if !regexp.MustCompile(`(?i)reconnect|resetting|starting error recovery`).MatchString(dmesg) {
		t.Errorf("the kernel log does not show the path's loss")
	}
	step(t, vm, time.Minute, "nvme disconnect -n "+mpathNQN)
}

// mpathDevice returns the multipath disk (nvmeXnY) of mpathNQN's
// namespace 1.
func mpathDevice(t *testing.T, vm *lab.VM) string {
	t.Helper()
	out := step(t, vm, time.Minute, fmt.Sprintf(
		`for i in $(seq 1 100); do for b in /sys/block/nvme*n*; do `+
			`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = 1 ] && [ -b /dev/$(basename $b) ] && [ "$(cat $b/size)" -gt 0 ] && basename $b && exit 0; done; sleep 0.1; done; exit 1`, mpathNQN))
	return strings.TrimSpace(out)
}

// ioSample is what the sampler saw at one moment: the I/O commands each
// nvmetd had completed (-1: no answer, the process is down).
type ioSample struct {
	at   time.Time
	a, b int64
}

// ioSampler polls the two nvmetd processes' status (their control sockets)
// every 20 ms.
type ioSampler struct {
	done    chan struct{}
	exited  chan struct{}
	mu      sync.Mutex
	samples []ioSample
}

// last returns the last counts seen of each process (-1: none yet).
func (s *ioSampler) last() [2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := [2]int64{-1, -1}
	for _, x := range s.samples {
		if x.a >= 0 {
			out[0] = x.a
		}
		if x.b >= 0 {
			out[1] = x.b
		}
	}
	return out
}

// waitProgress waits until process i (0: A, 1: B) completed n more I/O
// commands than when it was called.
func (s *ioSampler) waitProgress(t *testing.T, i int, n int64, what string) {
	t.Helper()
	base := s.last()[i]
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if now := s.last()[i]; now >= 0 && now >= base+n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmetd %c did not complete %d more I/O commands %s", 'A'+i, n, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startIOSampler(dirA, dirB string) *ioSampler {
	s := &ioSampler{done: make(chan struct{}), exited: make(chan struct{})}
	client := func(sock string) *http.Client {
		return &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	}
	ca, cb := client(filepath.Join(dirA, "ctl.sock")), client(filepath.Join(dirB, "ctl.sock"))
	count := func(c *http.Client) int64 {
		resp, err := c.Get("http://nvmetd/v1/status")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var st struct {
			Target struct {
				Subsystems []struct {
					Namespaces []struct {
						IO struct {
							R uint64 `json:"read_commands"`
							W uint64 `json:"write_commands"`
						} `json:"io"`
					} `json:"namespaces"`
				} `json:"subsystems"`
			} `json:"target"`
		}
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return -1
		}
		var n int64
		for _, sub := range st.Target.Subsystems {
			for _, ns := range sub.Namespaces {
				n += int64(ns.IO.R + ns.IO.W)
			}
		}
		return n
	}
	go func() {
		defer close(s.exited)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			x := ioSample{time.Now(), count(ca), count(cb)}
			s.mu.Lock()
			s.samples = append(s.samples, x)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *ioSampler) stop() []ioSample {
	close(s.done)
	<-s.exited
	return s.samples
}

// reportKernelFailovers prints each move of the kernel host's I/O from one
// nvmetd to the other: the time from the last sample in which only the old
// one had completed more I/O to the first in which the new one had (20 ms
// sampling of the targets' counters), and when it happened relative to the
// test's events.
func reportKernelFailovers(t *testing.T, ss []ioSample, events map[string]time.Time) {
	if len(ss) < 2 {
		t.Logf("failover times: no samples")
		return
	}
	start := ss[0].at
	names := make([]string, 0, len(events))
	for k := range events {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Logf("event %s at +%.3fs", k, events[k].Sub(start).Seconds())
	}
	// Which nvmetd completed more I/O in each sample (a counter that
	// restarts, or is missing, counts as no progress).
	prog := make([][2]bool, len(ss))
	prev := ss[0]
	for i, s := range ss[1:] {
		prog[i+1] = [2]bool{s.a > prev.a && prev.a >= 0, s.b > prev.b && prev.b >= 0}
		if s.a >= 0 {
			prev.a = s.a
		}
		if s.b >= 0 {
			prev.b = s.b
		}
	}
	name := [2]string{"A", "B"}
	owner := -1
	for i := range ss {
		single := -1
		switch prog[i] {
		case [2]bool{true, false}:
			single = 0
		case [2]bool{false, true}:
			single = 1
		}
		if single < 0 {
			continue
		}
		if owner >= 0 && single != owner {
			j := i - 1
			for j > 0 && !prog[j][owner] {
				j--
			}
			k := j + 1
			for k < i && !prog[k][single] {
				k++
			}
			t.Logf("kernel host failover %s -> %s at +%.3fs: %.0f ms from the last I/O completed by nvmetd %s to the first by nvmetd %s (20 ms sampling)",
				name[owner], name[single], ss[k].at.Sub(start).Seconds(), float64(ss[k].at.Sub(ss[j].at).Microseconds())/1000, name[owner], name[single])
		}
		owner = single
	}
}
