package interop_test

import (
	"context"
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

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The stock Linux NVMe/TCP host (nvme-tcp, no siw) against nvmetd beyond
// the data path of testLinuxHostTCP (issue 24): a file system on the
// namespace (LinuxHostTCPExt4), the kernel's own reconnect after the
// target process is SIGKILLed and started again (LinuxHostTCPReconnect),
// and kernel native multipath over one NVMe/RDMA (siw) path and one
// NVMe/TCP path of the same subsystem with the TCP port removed and
// restored under fio (LinuxHostTCPRDMAMultipath).

// startInProcessTarget starts cfg's target in this process and stops it
// when the test ends.
func startInProcessTarget(t *testing.T, cfg *target.Config) *target.Target {
	t.Helper()
	tgt, err := target.New(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tgt.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	})
	return tgt
}

// checkNoNVMeErrors fails t for every NVMe line of the kernel log that
// reports an error.
func checkNoNVMeErrors(t *testing.T, dmesg string) {
	t.Helper()
	bad := regexp.MustCompile(`(?i)(error|fail|timeout|timed out|reset|abort|bogus|invalid|I/O err)`)
	for _, l := range strings.Split(dmesg, "\n") {
		if (strings.Contains(strings.ToLower(l), "nvme") || strings.Contains(l, "EXT4")) && bad.MatchString(l) {
			t.Errorf("kernel: %s", l)
		}
	}
}

// testLinuxHostTCPExt4: ext4 on a file-backed namespace over NVMe/TCP:
// mkfs.ext4, mount, fio with crc32c verification on files in it (direct
// random writes, and buffered sequential writes with an fsync at the
// end), umount, and fsck.ext4 -fn finds the file system clean.
func testLinuxHostTCPExt4(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	tport := freeTCPPort(t)
	dir := t.TempDir()
	startInProcessTarget(t, &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: tport, Transport: target.TransportTCP, Subsystems: []string{interopNQN}}},
		Subsystems: []target.SubsystemConfig{{
			NQN: interopNQN, AllowAnyHost: true, Model: "nvmetd interop",
			Namespaces: []target.NamespaceConfig{
				{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns1.img"), Size: "128MiB"}},
			},
		}},
	})
	defer vm.Exec(context.Background(), "umount /mnt/nvmetd-tcp 2>/dev/null; nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, fmt.Sprintf("modprobe nvme-tcp && nvme connect -t tcp -a %s -s %d -n %s -i 2", vm.HostAddr(), tport, interopNQN))
	waitController(t, vm)
	ns := nsDevice(t, vm, 1)
	step(t, vm, 2*time.Minute, fmt.Sprintf("mkfs.ext4 -q -F /dev/%s && mkdir -p /mnt/nvmetd-tcp && mount /dev/%[1]s /mnt/nvmetd-tcp && df -h /mnt/nvmetd-tcp", ns))
	out := step(t, vm, 5*time.Minute, "cd /mnt/nvmetd-tcp && fio --verify=crc32c --do_verify=1 --verify_fatal=1 "+
		"--name=direct --filename=direct.dat --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --size=16M --iodepth=16 "+
		"--name=buffered --filename=buffered.dat --ioengine=psync --rw=write --bs=64k --size=24M --end_fsync=1 "+
		"2>&1 | grep -E 'err=|READ:|WRITE:|verify|error'")
	if strings.Count(out, "err= 0") != 2 {
		t.Fatalf("fio reported errors (want err= 0 for both jobs)")
	}
	step(t, vm, 2*time.Minute, fmt.Sprintf("cd / && umount /mnt/nvmetd-tcp && fsck.ext4 -fn /dev/%s", ns))
	step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)
	checkNoNVMeErrors(t, dmesgSince(t, vm, mark))
}

// tcpdProc is one nvmetd process of testLinuxHostTCPReconnect, serving a
// file on one NVMe/TCP port.
type tcpdProc struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	img    string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func (p *tcpdProc) start() {
	t := p.t
	t.Helper()
	// The file opened with O_DIRECT: a write the host saw completed is in
	// the file (the host machine's disk cache aside: a flush is fdatasync),
	// not in this process's memory.
	cfg := fmt.Sprintf(`daemon: {control_socket: %s, log_level: info}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, transport: tcp, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    model: nvmetd tcp reconnect interop
    namespaces:
      - {nsid: 1, backend: {kind: file, path: %s, size: 64MiB, direct: true}}
`, filepath.Join(p.dir, "ctl.sock"), p.port, interopNQN, interopNQN, p.img)
	cf := filepath.Join(p.dir, "nvmetd.yaml")
	if err := os.WriteFile(cf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--config", cf)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p.exited = exited
	cmd := p.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(p.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
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

func (p *tcpdProc) stop(sig syscall.Signal) {
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

// guestCtrlState waits until the guest's controller ctrl is in one of the
// space-separated states want.
func guestCtrlState(t *testing.T, vm *lab.VM, ctrl, want string) {
	t.Helper()
	step(t, vm, 3*time.Minute, fmt.Sprintf(`for i in $(seq 1 1800); do s=$(cat /sys/class/nvme/%s/state); case " %s " in *" $s "*) echo $s; exit 0;; esac; sleep 0.1; done; echo $s; exit 1`, ctrl, want))
}

// testLinuxHostTCPReconnect: the kernel's NVMe/TCP host connected with a
// reconnect delay of 1 s and a controller loss timeout of 10 minutes
// (-c 1 -l 600) to an nvmetd process serving a file with O_DIRECT, the
// verified workload (vwriter: versioned 4 KiB blocks with O_DIRECT, each
// read back) writing; nvmetd is SIGKILLed, the controller goes to
// connecting (the I/O waits on the multipath head, no path being left),
// nvmetd starts again on the same port with the same file, the kernel
// reconnects by itself and the workload goes on; vwriter's sweep of the
// whole disk then finds every block at its last acknowledged write or a
// later one, and no I/O error.
func testLinuxHostTCPReconnect(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	bin := hostBuild(t, "github.com/nvmetd/nvmetd/cmd/nvmetd", false)
	dir := t.TempDir()
	p := &tcpdProc{t: t, bin: bin, dir: dir, port: freeTCPPort(t), img: filepath.Join(dir, "ns1.img"), log: filepath.Join(dir, "nvmetd.log")}
	p.start()
	defer func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			logTail(t, "nvmetd", p.log)
		}
	}()
	defer vm.Exec(context.Background(), "touch /root/tcprc.stop; for i in $(seq 1 600); do [ -s /root/tcprc.rc ] && break; sleep 0.1; done; nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, fmt.Sprintf("modprobe nvme-tcp && nvme connect -t tcp -a %s -s %d -n %s -i 2 -c 1 -l 600", vm.HostAddr(), p.port, interopNQN))
	ctrl := waitController(t, vm)
	dev := nsDevice(t, vm, 1)
	vw := startLinuxWriter(t, vm, dev, "tcprc")
	vw.waitWrites(200, "before the kill")
	events := map[string]time.Time{}

	events["SIGKILL"] = time.Now()
	p.stop(syscall.SIGKILL)
	guestCtrlState(t, vm, ctrl, "resetting connecting")
	// The kernel retries every second and is refused until nvmetd is
	// back; vwriter's writes wait meanwhile.
	step(t, vm, time.Minute, "sleep 3; cat /sys/class/nvme/"+ctrl+"/state")
	events["restart"] = time.Now()
	p.start()
	guestCtrlState(t, vm, ctrl, "live")
	vw.waitWrites(500, "after the restart")

	sum, off := vw.stop()
	dmesg := dmesgSince(t, vm, mark)
	checkLinuxSweep(t, sum, dmesg)
	logLinuxStalls(t, sum, off, events, 0, "")
	if sum.Workload.Writes == 0 {
		t.Errorf("vwriter counted no acknowledged write")
	}
	t.Logf("kernel log (nvme):\n%s", grepLines(dmesg, "nvme"))
	if !regexp.MustCompile(`(?i)reconnect`).MatchString(dmesg) {
		t.Errorf("the kernel log does not show the reconnect")
	}
	step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)
}

// portIO returns the I/O commands completed by the target's controllers
// of interopNQN on each port (by port ID) that are connected now.
func portIO(tgt *target.Target) map[uint16]uint64 {
	n := map[uint16]uint64{}
	for _, c := range tgt.Status().Controllers {
		if c.Subsystem == interopNQN {
			n[c.PortID] += c.IO.ReadCommands + c.IO.WriteCommands
		}
	}
	return n
}

// waitPortIO waits until the controllers of interopNQN connected on port
// id have completed n I/O commands more than base (counted per controller
// ID, so that a reconnected controller counts from 0).
func waitPortIO(t *testing.T, tgt *target.Target, id uint16, n uint64, what string) {
	t.Helper()
	base := map[uint16]uint64{}
	for _, c := range tgt.Status().Controllers {
		if c.Subsystem == interopNQN && c.PortID == id {
			base[c.CNTLID] = c.IO.ReadCommands + c.IO.WriteCommands
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var done uint64
		for _, c := range tgt.Status().Controllers {
			if c.Subsystem == interopNQN && c.PortID == id {
				done += c.IO.ReadCommands + c.IO.WriteCommands - base[c.CNTLID]
			}
		}
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d completed %d I/O commands %s, want %d (per port: %v)", id, done, what, n, portIO(tgt))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitNoControllersOn waits until the target has no controller of
// interopNQN on port id (those of a removed port go with its
// connections).
func waitNoControllersOn(t *testing.T, tgt *target.Target, id uint16) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left []uint16
		for _, c := range tgt.Status().Controllers {
			if c.Subsystem == interopNQN && c.PortID == id {
				left = append(left, c.CNTLID)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("controllers %v still on the removed port %d", left, id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testLinuxHostTCPRDMAMultipath: the kernel's native multipath over two
// paths of one subsystem of one nvmetd, one NVMe/RDMA (nvme-rdma over
// siw, port 1) and one NVMe/TCP (port 2), with the round-robin I/O
// policy so that both carry I/O. fio with crc32c verification runs in a
// loop on the multipath disk while a reload removes the TCP port (its
// connections closed): the TCP path goes to connecting, the I/O goes on
// over RDMA and fio sees no error; a reload restores the port, the
// kernel reconnects the path by itself and it carries I/O again. (The
// RDMA port is the one kept: removing it under I/O meets Linux's
// nvme_rdma_post_send race, docs/linux-interop.md, an EIO of the kernel's
// own that testLinuxHostMultipath covers.)
func testLinuxHostTCPRDMAMultipath(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	rport, tport := freeTCPPort(t), freeTCPPort(t)
	dir := t.TempDir()
	rdma := target.PortConfig{ID: 1, Address: "127.0.0.1", ServiceID: rport, Subsystems: []string{interopNQN}}
	tcp := target.PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: tport, Transport: target.TransportTCP, Subsystems: []string{interopNQN}}
	cfg := &target.Config{
		Ports: []target.PortConfig{rdma, tcp},
		Subsystems: []target.SubsystemConfig{{
			NQN: interopNQN, AllowAnyHost: true, Model: "nvmetd interop",
			Namespaces: []target.NamespaceConfig{
				{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns1.img"), Size: "64MiB"}},
			},
		}},
	}
	tgt := startInProcessTarget(t, cfg)
	addr := vm.HostAddr()
	defer vm.Exec(context.Background(), "touch /root/mx.stop; for i in $(seq 1 1200); do [ -s /root/mx.rc ] && break; sleep 0.1; done; nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, "modprobe nvme-tcp; cat /sys/module/nvme_core/parameters/multipath; rm -f /root/mx.*")
	step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 2 -c 1 -l 600", addr, rport, interopNQN))
	step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t tcp -a %s -s %d -n %s -i 2 -c 1 -l 600", addr, tport, interopNQN))
	ctrls := step(t, vm, time.Minute, fmt.Sprintf(`for i in $(seq 1 100); do n=0; for c in /sys/class/nvme/nvme*; do `+
		`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && n=$((n+1)); done; [ $n = 2 ] && break; sleep 0.1; done; `+
		`for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = %[1]s ] && echo $(basename $c) $(cat $c/transport) $(cat $c/state); done`, interopNQN))
	ctrlOf := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(ctrls), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "live" {
			ctrlOf[f[1]] = f[0]
		}
	}
	if ctrlOf["rdma"] == "" || ctrlOf["tcp"] == "" {
		t.Fatalf("want one live rdma and one live tcp controller, got:\n%s", ctrls)
	}
	dev := nsDevice(t, vm, 1)
	out := step(t, vm, time.Minute, "nvme list-subsys /dev/"+dev+"; for s in /sys/class/nvme-subsystem/*; do "+
		"[ \"$(cat $s/subsysnqn)\" = "+interopNQN+" ] && echo round-robin > $s/iopolicy && cat $s/iopolicy; done")
	if strings.Count(out, " live") != 2 || !strings.Contains(out, "rdma") || !strings.Contains(out, "tcp") {
		t.Fatalf("nvme list-subsys does not show a live rdma path and a live tcp path of one subsystem")
	}
	if !strings.Contains(out, "round-robin") {
		t.Fatalf("the I/O policy is not round-robin")
	}

	// fio (write, then read back and verify with crc32c) in a loop until
	// told to stop; the first failing run ends it (/root/mx.fail).
	step(t, vm, time.Minute, fmt.Sprintf(`(i=0; while [ ! -e /root/mx.stop ]; do `+
		`fio --name=mx --filename=/dev/%s --ioengine=libaio --direct=1 --rw=randwrite --bs=4k-64k --size=4M --iodepth=8 --numjobs=2 --offset_increment=8M `+
		`--verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting > /root/mx.fio.$i 2>&1 || { echo $i > /root/mx.fail; break; }; `+
		`i=$((i+1)); echo $i > /root/mx.runs; done; echo done > /root/mx.rc) >/dev/null 2>&1 &`+"\n"+`echo started`, dev))
	runs := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, _ := vm.Exec(ctx, "cat /root/mx.runs 2>/dev/null || echo 0")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	failed := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, _ := vm.Exec(ctx, "[ -e /root/mx.fail ] && cat /root/mx.fio.$(cat /root/mx.fail); true")
		return out
	}
	// waitRuns waits for a fio run that started after the call to finish.
	waitRuns := func(what string) {
		t.Helper()
		want := runs() + 2
		deadline := time.Now().Add(10 * time.Minute)
		for runs() < want {
			if f := failed(); f != "" {
				t.Fatalf("fio failed %s:\n%s", what, f)
			}
			if time.Now().After(deadline) {
				t.Fatalf("fio did not complete a whole run %s", what)
			}
			time.Sleep(time.Second)
		}
	}
	waitPortIO(t, tgt, 1, 200, "before the removal (rdma)")
	waitPortIO(t, tgt, 2, 200, "before the removal (tcp)")

	// The TCP port removed: its controller is disconnected, the host's
	// TCP path goes to connecting and is refused; all I/O over RDMA.
	cfg.Ports = []target.PortConfig{rdma}
	if err := tgt.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	guestCtrlState(t, vm, ctrlOf["tcp"], "resetting connecting")
	waitPortIO(t, tgt, 1, 500, "while the TCP port is removed")
	waitRuns("while the TCP port is removed")
	waitNoControllersOn(t, tgt, 2)
	guestCtrlState(t, vm, ctrlOf["tcp"], "connecting")

	// The port back: the kernel reconnects the path by itself, and it
	// carries I/O again.
	cfg.Ports = []target.PortConfig{rdma, tcp}
	if err := tgt.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	guestCtrlState(t, vm, ctrlOf["tcp"], "live")
	waitPortIO(t, tgt, 2, 200, "after the TCP port came back")
	waitPortIO(t, tgt, 1, 200, "after the TCP port came back (rdma)")
	waitRuns("after the TCP port came back")

	step(t, vm, 10*time.Minute, "touch /root/mx.stop; for i in $(seq 1 6000); do [ -s /root/mx.rc ] && break; sleep 0.1; done; cat /root/mx.rc; cat /root/mx.runs")
	if f := failed(); f != "" {
		t.Fatalf("fio failed:\n%s", f)
	}
	out = step(t, vm, time.Minute, "cat /root/mx.fio.* | grep -E 'err=|verify|error' | sort | uniq -c")
	if strings.Contains(out, "err=") && regexp.MustCompile(`err= *[1-9-]`).MatchString(out) {
		t.Errorf("a fio run reported errors")
	}
	dmesg := dmesgSince(t, vm, mark)
	t.Logf("kernel log (nvme):\n%s", grepLines(dmesg, "nvme"))
	if regexp.MustCompile(`(?i)I/O error|critical medium|blk_update_request`).MatchString(dmesg) {
		t.Errorf("the kernel log shows an I/O error on the multipath disk")
	}
	step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)
	waitNoControllers(t, tgt)
}
