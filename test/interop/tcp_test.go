package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/target"
)

// testLinuxHostTCP drives the guest's stock NVMe/TCP host (nvme-cli, the
// kernel's nvme-tcp; no siw) against an nvmetd whose subsystem is served
// on an RDMA port and a TCP port at once: nvme discover -t tcp lists the
// TCP port, then nvme connect -t tcp without and with header and data
// digests (-g -G), and with SQ flow control disabled (--disable-sqflow:
// the target must see CATTR bit 2 on every queue, and answers reads by the
// C2HData's SUCCESS flag), fio write+verify and dd+cmp on the namespaces,
// disconnect, and a kernel log free of NVMe errors.
func testLinuxHostTCP(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	rport, tport := freeTCPPort(t), freeTCPPort(t)
	dir := t.TempDir()
	cfg := &target.Config{
		Ports: []target.PortConfig{
			{ID: 1, Address: "127.0.0.1", ServiceID: rport, Subsystems: []string{interopNQN}},
			{ID: 2, Address: "127.0.0.1", ServiceID: tport, Transport: target.TransportTCP, Subsystems: []string{interopNQN}},
		},
		Subsystems: []target.SubsystemConfig{{
			NQN: interopNQN, AllowAnyHost: true, Model: "nvmetd interop",
			Namespaces: []target.NamespaceConfig{
				{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns1.img"), Size: "256MiB"}},
				{NSID: 2, Backend: target.BackendConfig{Kind: "memory", Size: "128MiB"}},
			},
		}},
	}
	tgt, err := target.New(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tgt.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	}()
	addr := vm.HostAddr()
	defer vm.Exec(context.Background(), "nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	mark := kmsgMark(t, vm)
	step(t, vm, time.Minute, "modprobe nvme-tcp && uname -r")

	out := step(t, vm, time.Minute, fmt.Sprintf("nvme discover -t tcp -a %s -s %d", addr, tport))
	if !strings.Contains(out, "subnqn:  "+interopNQN) || !strings.Contains(out, "trtype:  tcp") ||
		!strings.Contains(out, fmt.Sprintf("trsvcid: %d", tport)) || !strings.Contains(out, "sectype: none") {
		t.Fatalf("the TCP port's discovery log does not list the subsystem on tcp")
	}

	for _, dg := range []struct{ name, flags string }{{"no digests", ""}, {"header and data digests", " -g -G"},
		{"SQ flow control disabled", " --disable-sqflow"}} {
		t.Logf("NVMe/TCP, %s", dg.name)
		step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t tcp -a %s -s %d -n %s -i 2%s", addr, tport, interopNQN, dg.flags))
		ctrl := waitController(t, vm)
		step(t, vm, time.Minute, fmt.Sprintf("for f in transport address subsysnqn cntlid queue_count state; do echo $f: $(cat /sys/class/nvme/%s/$f); done", ctrl))
		if tr := strings.TrimSpace(step(t, vm, time.Minute, "cat /sys/class/nvme/"+ctrl+"/transport")); tr != "tcp" {
			t.Fatalf("transport %s, want tcp", tr)
		}
		// Every queue of the host's controller is on TCP, and SQ flow
		// control is disabled on each exactly when the host asked.
		sqflowOff := strings.Contains(dg.flags, "--disable-sqflow")
		n := 0
		for _, qs := range tgt.Queues() {
			if qs.Subsystem != interopNQN {
				continue
			}
			n++
			if qs.Transport != "tcp" || qs.SQFlowControlDisabled != sqflowOff {
				t.Errorf("queue %d: transport %s, SQ flow control disabled %v; want tcp, %v", qs.QID, qs.Transport, qs.SQFlowControlDisabled, sqflowOff)
			}
		}
		if n != 3 {
			t.Errorf("%d queues of the subsystem, want 3 (admin and -i 2)", n)
		}
		ns1, ns2 := nsDevice(t, vm, 1), nsDevice(t, vm, 2)
		// 3 minutes: under TCG on a loaded machine the 8 MiB of direct
		// I/O took up to 47 s.
		step(t, vm, 3*time.Minute, fmt.Sprintf("head -c 4194304 /dev/urandom > /root/r && dd if=/root/r of=/dev/%s bs=128k oflag=direct status=none && "+
			"dd if=/dev/%s bs=128k count=32 iflag=direct status=none | cmp - /root/r && "+
			"dd if=/root/r of=/dev/%s bs=4k oflag=direct status=none && dd if=/dev/%s bs=4k count=1024 iflag=direct status=none | cmp - /root/r && echo dd ok",
			ns1, ns1, ns2, ns2))
		for _, job := range []string{
			fmt.Sprintf("--name=rand --filename=/dev/%s --rw=randwrite --bs=4k --size=16M --numjobs=2 --iodepth=16 --offset_increment=32M", ns2),
			fmt.Sprintf("--name=seq --filename=/dev/%s --rw=write --bs=128k --size=32M --numjobs=2 --iodepth=8 --offset_increment=64M", ns1),
			fmt.Sprintf("--name=mixed --filename=/dev/%s --rw=randrw --bs=4k-256k --size=16M --numjobs=2 --iodepth=8 --offset_increment=32M", ns2),
		} {
			out := step(t, vm, 4*time.Minute, "fio --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting "+job+
				" 2>&1 | grep -E 'err=|READ:|WRITE:|verify|error' ")
			if !strings.Contains(out, "err= 0") {
				t.Fatalf("fio reported errors")
			}
		}
		step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)
	}

	dmesg := dmesgSince(t, vm, mark)
	bad := regexp.MustCompile(`(?i)(error|fail|timeout|timed out|reset|abort|bogus|invalid|I/O err)`)
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(strings.ToLower(l), "nvme") && bad.MatchString(l) {
			t.Errorf("kernel: %s", l)
		}
	}
	waitNoControllers(t, tgt)
}
