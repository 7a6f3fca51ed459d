package interop_test

import (
	"context"
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

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// The gateway group against the Linux host (issue 16): two nvmetd-rbd
// gateways on this machine serve one subsystem with one RBD image
// namespace (ANA group 1, preferred owner gw-a; CNTLIDs 1-1000 and
// 1001-2000) from the test's Ceph cluster (test/ceph/cephtest). The
// guest's stock Linux host connects to both (native multipath: one
// /dev/nvmeXnY), gw-a's path optimized and gw-b's inaccessible; fio with
// crc32c verification runs on the multipath disk while gw-a is SIGKILLed
// (gw-b fences it and takes the group: its path goes optimized and the I/O
// moves there) and restarted (failback: gw-b hands the group over, the I/O
// comes back). No fio error; the failover times (20 ms samples of the
// gateways' I/O counters) are printed.

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
ports:
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
`, filepath.Join(p.dir, "ctl.sock"), p.name, group, c.Conf, c.ClientID, c.Keyring, c.Pool, p.port, gatewayNQN,
		gatewayNQN, cmin, cmin+999, c.Pool, image, c.Conf, c.ClientID, c.Keyring)
}

func (p *gwProc) start() {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--config", filepath.Join(p.dir, "nvmetd.yaml"))
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}
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
		c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(p.port), time.Second)
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
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(p.log)
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
// script installed librbd-dev).
func buildGatewayBinary(t *testing.T) string {
	t.Helper()
	tags, err := exec.Command("make", "-s", "-C", "../..", "rbd-tags").Output()
	if err != nil {
		t.Fatalf("make rbd-tags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nvmetd-rbd")
	cmd := exec.Command("go", "build", "-tags", strings.TrimSpace(string(tags)), "-o", bin, "github.com/nvmetd/nvmetd/cmd/nvmetd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nvmetd-rbd: %v\n%s", err, out)
	}
	return bin
}

func testLinuxHostGateway(t *testing.T, k kernel) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 256<<20)
	bin := buildGatewayBinary(t)
	vm := startHealthyVM(t, k)
	var rb [4]byte
	rand.Read(rb[:])
	group := "i" + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	var procs [2]*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &gwProc{t: t, name: name, bin: bin, dir: d, port: freeTCPPort(t), log: filepath.Join(d, "nvmetd.log")}
		if err := os.WriteFile(filepath.Join(d, "nvmetd.yaml"), []byte(procs[i].config(c, image, group, 1+1000*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, b := procs[0], procs[1]
	a.start()
	a.waitLog(`group 1: set-ana optimized`)
	b.start()
	defer func() {
		for _, p := range procs {
			p.stop(syscall.SIGTERM)
			if t.Failed() {
				out, _ := os.ReadFile(p.log)
				if len(out) > 6000 {
					out = out[len(out)-6000:]
				}
				t.Logf("%s:\n%s", p.name, out)
			}
		}
	}()
	addr := vm.HostAddr()
	defer vm.Exec(context.Background(), "touch /root/gw.stop; sleep 1; nvme disconnect -n "+gatewayNQN+" >/dev/null 2>&1; true")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, "rm -f /root/gw.*")
	for _, p := range procs {
		step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 2 -c 1 -l 600", addr, p.port, gatewayNQN))
	}
	ctrls := step(t, vm, time.Minute, fmt.Sprintf(`for i in $(seq 1 100); do n=0; for c in /sys/class/nvme/nvme*; do `+
		`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && n=$((n+1)); done; [ $n = 2 ] && break; sleep 0.1; done; `+
		`for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && echo $(basename $c) $(cat $c/address) $(cat $c/cntlid); done`, gatewayNQN, gatewayNQN))
	ctrlOf := map[int]string{}
	for _, l := range strings.Split(strings.TrimSpace(ctrls), "\n") {
		f := strings.Fields(l)
		for _, p := range procs {
			if len(f) >= 2 && strings.Contains(f[1], fmt.Sprintf("trsvcid=%d", p.port)) {
				ctrlOf[p.port] = f[0]
			}
		}
	}
	if len(ctrlOf) != 2 {
		t.Fatalf("want one live controller per gateway, got:\n%s", ctrls)
	}
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
	step(t, vm, time.Minute, fmt.Sprintf(`(i=0; while [ ! -e /root/gw.stop ]; do i=$((i+1)); `+
		`fio --name=gw --filename=/dev/%s --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --size=16M --iodepth=16 --numjobs=1 `+
		`--verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting > /root/gw.run 2>&1; rc=$?; grep -E 'err=|clat \(|verify|error|fio:' /root/gw.run; echo "run $i done rc=$rc"; done; echo finished) > /root/gw.fio 2>&1 &`+"\n"+"echo started",
		dev))
	fioRuns := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		o, _ := vm.Exec(ctx, "grep -c '^run .* done' /root/gw.fio || true")
		n, _ := strconv.Atoi(strings.TrimSpace(o))
		return n
	}
	sampler.waitProgress(t, 0, 500, "before the gateway is killed")
	events := map[string]time.Time{}

	// gw-a, the owner, is SIGKILLed: gw-b fences it and takes the group.
	events["kill gw-a"] = time.Now()
	a.stop(syscall.SIGKILL)
	ctrlState(a.port, "resetting connecting")
	anaState(b.port, "optimized")
	sampler.waitProgress(t, 1, 500, "after gw-b took the group")
	b.waitLog(`(?s)fencing the previous holder.*group 1: set-ana optimized`)

	// gw-a restarted: failback.
	events["restart gw-a"] = time.Now()
	a.start()
	ctrlState(a.port, "live")
	anaState(a.port, "optimized")
	anaState(b.port, "inaccessible")
	sampler.waitProgress(t, 0, 500, "after the failback to gw-a")
	n := fioRuns()
	deadline := time.Now().Add(10 * time.Minute)
	for fioRuns() <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no fio job completed after the failback")
		}
		time.Sleep(time.Second)
	}

	step(t, vm, 15*time.Minute, "touch /root/gw.stop; for i in $(seq 1 6000); do grep -q finished /root/gw.fio && break; sleep 0.1; done; cat /root/gw.fio")
	fio := step(t, vm, time.Minute, "cat /root/gw.fio")
	if fioRuns() < 2 {
		t.Fatalf("fewer than two fio jobs completed")
	}
	if regexp.MustCompile(`(?i)bad magic|mismatch|verify failed|crc32c: verify`).MatchString(fio) ||
		regexp.MustCompile(`err=\s*[1-9]`).MatchString(fio) || regexp.MustCompile(`rc=[1-9]`).MatchString(fio) || !strings.Contains(fio, "err= 0") {
		t.Fatalf("fio reported errors")
	}
	reportKernelFailovers(t, sampler.stop(), events)
	dmesg := dmesgSince(t, vm, mark)
	var nvmeLines []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "nvme") {
			nvmeLines = append(nvmeLines, l)
		}
	}
	t.Logf("kernel log (nvme):\n%s", strings.Join(nvmeLines, "\n"))
	step(t, vm, time.Minute, "nvme disconnect -n "+gatewayNQN)
}
