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

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The target interop test runs the nvmetd target in this process on
// 127.0.0.1:<free port> and drives the guest's stock Linux NVMe/RDMA host
// (nvme-cli, the kernel's nvme-rdma over siw) against it through 10.0.2.2:
// discover, connect with several I/O queues, mkfs and mount a file system,
// write files and check them after a reconnect, fio write+verify runs on the
// raw namespaces, disconnect, and a dmesg free of NVMe and siw errors.

const (
	interopNQN  = "nqn.2024-01.io.nvmetd.interop:target"
	interopNQN2 = "nqn.2024-01.io.nvmetd.interop:hidden"
)

// freeTCPPort returns a TCP port on 127.0.0.1 that was free a moment ago.
var freeTCPPort = testnode.FreePort

// step runs a guest command, logs it and its output, and fails the test on
// error.
func step(t *testing.T, vm *lab.VM, timeout time.Duration, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	out, err := vm.Exec(ctx, cmd)
	t.Logf("guest$ %s   (%s)\n%s", cmd, time.Since(start).Round(time.Millisecond), strings.TrimRight(out, "\n"))
	if err != nil {
		t.Fatalf("guest command failed: %v", err)
	}
	return out
}

func testLinuxHostAgainstTarget(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	port := freeTCPPort(t)
	dir := t.TempDir()
	cfg := &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: port, Subsystems: []string{interopNQN, interopNQN2}}},
		Subsystems: []target.SubsystemConfig{
			{
				NQN: interopNQN, AllowAnyHost: true, Model: "nvmetd interop",
				Namespaces: []target.NamespaceConfig{
					{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns1.img"), Size: "256MiB"}},
					{NSID: 2, Backend: target.BackendConfig{Kind: "memory", Size: "128MiB"}},
				},
			},
			// A subsystem no host may see: absent from the discovery log.
			{NQN: interopNQN2, AllowedHosts: []string{"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"},
				Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: target.BackendConfig{Kind: "null", Size: "1GiB"}}}},
		},
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
	// Leave the guest clean whatever happens.
	defer vm.Exec(context.Background(), "umount /mnt/nvmetd 2>/dev/null; nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	step(t, vm, time.Minute, "dmesg -c >/dev/null; rdma link show")

	out := step(t, vm, time.Minute, fmt.Sprintf("nvme discover -t rdma -a %s -s %d", addr, port))
	if !strings.Contains(out, "subnqn:  "+interopNQN) || strings.Contains(out, interopNQN2) || !strings.Contains(out, "trtype:  rdma") {
		t.Fatalf("discovery log does not list exactly the visible subsystem")
	}

	connect := fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 2", addr, port, interopNQN)
	step(t, vm, time.Minute, connect)
	ctrl := waitController(t, vm)
	step(t, vm, time.Minute, fmt.Sprintf("nvme list; for f in transport address subsysnqn model cntlid queue_count state; do echo $f: $(cat /sys/class/nvme/%s/$f); done", ctrl))
	if qc := strings.TrimSpace(step(t, vm, time.Minute, "cat /sys/class/nvme/"+ctrl+"/queue_count")); qc != "3" {
		t.Fatalf("queue_count %s, want 3 (admin + 2 I/O queues)", qc)
	}
	ns1, ns2 := nsDevice(t, vm, 1), nsDevice(t, vm, 2)
	step(t, vm, time.Minute, fmt.Sprintf("nvme id-ctrl /dev/%s | head -40; nvme id-ns /dev/%s | head -12", ctrl, ns1))

	// A file system on the file-backed namespace, files, checksums.
	step(t, vm, 2*time.Minute, fmt.Sprintf("mkfs.ext4 -q -F /dev/%s && mkdir -p /mnt/nvmetd && mount /dev/%s /mnt/nvmetd && "+
		"for i in 1 2 3; do head -c $((i*3*1024*1024+4097)) /dev/urandom > /mnt/nvmetd/f$i; done && mkdir /mnt/nvmetd/d && "+
		"for i in $(seq 1 50); do head -c $((i*512)) /dev/urandom > /mnt/nvmetd/d/s$i; done && "+
		"(cd /mnt/nvmetd && sha256sum f1 f2 f3 d/*) > /root/nvmetd.sums && sync && df -h /mnt/nvmetd && umount /mnt/nvmetd", ns1, ns1))
	step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)
	step(t, vm, time.Minute, "ls /dev/nvme* 2>/dev/null | grep -c n1 || true")

	// Reconnect and verify.
	step(t, vm, time.Minute, connect)
	ctrl = waitController(t, vm)
	ns1, ns2 = nsDevice(t, vm, 1), nsDevice(t, vm, 2)
	step(t, vm, 2*time.Minute, fmt.Sprintf("mount /dev/%s /mnt/nvmetd && cd /mnt/nvmetd && sha256sum -c /root/nvmetd.sums | tail -3 && "+
		"sha256sum -c /root/nvmetd.sums >/dev/null && cd / && umount /mnt/nvmetd && fsck.ext4 -fn /dev/%s", ns1, ns1))

	// A namespace added by a reload appears on the host (Namespace
	// Attribute Changed notice, Changed Namespace List, rescan), and goes
	// away when removed again.
	cfg.Subsystems[0].Namespaces = append(cfg.Subsystems[0].Namespaces,
		target.NamespaceConfig{NSID: 3, Backend: target.BackendConfig{Kind: "memory", Size: "64MiB"}})
	if err := tgt.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	ns3 := nsDevice(t, vm, 3)
	step(t, vm, time.Minute, fmt.Sprintf("head -c 1048576 /dev/urandom > /root/r && dd if=/root/r of=/dev/%s bs=64k oflag=direct status=none && "+
		"dd if=/dev/%s bs=64k count=16 iflag=direct status=none | cmp - /root/r && echo namespace 3 ok", ns3, ns3))
	cfg.Subsystems[0].Namespaces = cfg.Subsystems[0].Namespaces[:2]
	if err := tgt.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	step(t, vm, time.Minute, fmt.Sprintf("for i in $(seq 1 100); do [ -b /dev/%s ] || { echo %s removed; exit 0; }; sleep 0.1; done; exit 1", ns3, ns3))

	// fio write+verify on the raw namespaces: random 4 KiB and sequential
	// 128 KiB, several jobs with a queue depth each.
	for _, job := range []string{
		fmt.Sprintf("--name=rand --filename=/dev/%s --rw=randwrite --bs=4k --size=16M --numjobs=2 --iodepth=16 --offset_increment=32M", ns2),
		fmt.Sprintf("--name=seq --filename=/dev/%s --rw=write --bs=128k --size=32M --numjobs=2 --iodepth=8 --offset_increment=64M", ns1),
		fmt.Sprintf("--name=mixed --filename=/dev/%s --rw=randrw --bs=4k-64k --size=16M --numjobs=2 --iodepth=8 --offset_increment=32M", ns2),
	} {
		out := step(t, vm, 4*time.Minute, "fio --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting "+job+
			" 2>&1 | grep -E 'err=|READ:|WRITE:|verify|error' ")
		if !strings.Contains(out, "err= 0") {
			t.Fatalf("fio reported errors")
		}
	}
	step(t, vm, time.Minute, "nvme disconnect -n "+interopNQN)

	// The kernel log: no NVMe or siw errors.
	dmesg := step(t, vm, time.Minute, "dmesg | grep -Ei 'nvme|siw' | tail -40")
	bad := regexp.MustCompile(`(?i)(error|fail|timeout|timed out|reset|abort|bogus|invalid|I/O err)`)
	for _, l := range strings.Split(dmesg, "\n") {
		if bad.MatchString(l) && !strings.Contains(l, "module verification failed") {
			t.Errorf("kernel: %s", l)
		}
	}
	st := tgt.Status()
	for _, ns := range st.Subsystems[0].Namespaces {
		t.Logf("namespace %d: %+v", ns.NSID, ns.IO)
	}
	if len(st.Controllers) != 0 {
		t.Errorf("controllers left after disconnect: %+v", st.Controllers)
	}
}

// waitController returns the name (nvmeN) of the guest's controller of
// interopNQN once it is live.
func waitController(t *testing.T, vm *lab.VM) string {
	t.Helper()
	return waitControllerOf(t, vm, interopNQN)
}

// nsDevice returns the block device (nvmeXnY) of namespace nsid of
// interopNQN. With native multipath (the Debian kernel's default) the disk
// hangs off the subsystem, not the controller. A namespace added while
// connected shows its node before its capacity (the rescan revalidates it
// after adding the disk): wait for both.
func nsDevice(t *testing.T, vm *lab.VM, nsid int) string {
	t.Helper()
	return nsDeviceOf(t, vm, interopNQN, nsid)
}
