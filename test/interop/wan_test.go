package interop_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/wanlab"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// testWAN is the WAN lab's short subset (issue 26; docs/wan.md), in the VM
// the suite has already booted for this kernel: the lab's namespace wt,
// the shaped veth pair and nvmetd in wt are built, used and taken down
// again (wanlab.Setup's cleanup), so the tests after it find the guest as
// it was. The full matrix and the 30 s outage are make wan (test/wan).
//
//   - paths: two paths (1 ms / 0 % and 50 ms / 0.5 % loss), 128 KiB writes
//     at QD16 for 5 s from nvmeof (iWARP) and from the Linux host's
//     nvme-rdma over siw: 0 I/O errors (the figures are logged, not
//     asserted: TCG on a loaded machine);
//   - outage: a 10 s link-down in the middle of the versioned workload
//     (each write read back, a full sweep at the end), with nvmeof and
//     with the Linux host's nvme-rdma (siw): 0 I/O errors, 0 lost
//     acknowledged writes, and the I/O resumed after the link came back;
//   - siw through the re-segmenting relay (internal/testing/relay between
//     the guest's siw and nvmetd): the versioned workload and the sweep.
func testWAN(t *testing.T, k kernel) {
	vm := lab.Start(t, k.opts(labOpts))
	start := time.Now()
	l := wanlab.Setup(t, vm, wanlab.Options{Runtime: 5, NSMiB: 16, NoKernelTarget: true, NoIperf3: true})
	t.Logf("WAN lab built in %.1fs", time.Since(start).Seconds())
	defer func() {
		t.Logf("WAN subset: %.1fs in all (host load average %s)", time.Since(start).Seconds(), wanlab.Loadavg())
	}()
	path := func(name string) wanlab.Path {
		ps := wanlab.Pick(wanlab.Paths, []string{name}, wanlab.Path.Name)
		if len(ps) != 1 {
			t.Fatalf("no WAN path %s", name)
		}
		return ps[0]
	}
	writeQD16 := wanlab.Pick(wanlab.Loads, []string{"write-qd16"}, wanlab.Load.Name)

	t.Run("paths", func(t *testing.T) {
		l.SetT(t)
		for _, p := range []string{"1ms", "50ms"} {
			l.Shape(path(p))
			for _, sys := range []string{"nvmetd-iwarp", "nvmetd-siw-kernel"} {
				for _, r := range l.Measure(path(p), sys, writeQD16) {
					if r.Err() != "" {
						t.Errorf("%s", r.Describe())
						continue
					}
					t.Logf("%s", r.Describe())
				}
			}
		}
	})
	if !l.NvmetdAlive() {
		t.Fatal("nvmetd exited during the paths")
	}

	// The outage on the 1 ms path: the sweep reads the namespace whole at
	// the path's rate.
	outage := wanlab.Outage{Before: 8 * time.Second, Down: 10 * time.Second, Duration: 25 * time.Second}
	t.Run("outage", func(t *testing.T) {
		l.SetT(t)
		l.Shape(path("1ms"))
		t.Run("nvmeof-iwarp", func(t *testing.T) {
			l.SetT(t)
			l.Outage("nvmeof-iwarp", "-a "+wanlab.TargetIP+":4420 -n "+wanlab.NQN, outage)
		})
		t.Run("linux-nvme-rdma", func(t *testing.T) {
			l.SetT(t)
			dev, err := l.KernelConnect("rdma", "4420", wanlab.NQN)
			if err != nil {
				t.Fatal(err)
			}
			defer l.KernelDisconnect(wanlab.NQN)
			l.Outage("linux-nvme-rdma", "-d "+dev, outage)
		})
	})

	t.Run("siw-relay", func(t *testing.T) {
		l.SetT(t)
		testWANSiwRelay(t, l, path("1ms"))
	})
	if !l.NvmetdAlive() {
		log, _ := l.Sh(time.Minute, "tail -c 6000 /root/wan/nvmetd.log")
		t.Fatalf("nvmetd exited; its log ends:\n%s", log)
	}
}

// testWANSiwRelay runs the Linux host's nvme-rdma over siw to nvmetd
// through the re-segmenting relay (in wt, in front of nvmetd's iWARP
// port): segments of 1 to 3000 bytes in both directions, up to 2 ms of
// coalescing, pauses up to 200 µs. It asserts what Linux siw does there
// (docs/wan.md, The re-segmenting relay): the association comes up, the
// versioned workload runs with 0 I/O errors and the sweep finds every
// block at its last acknowledged write or a later one, and the relay did
// split and join the stream (the FPDUs reached both ends unaligned).
func testWANSiwRelay(t *testing.T, l *wanlab.Lab, p wanlab.Path) {
	l.Shape(p)
	r := l.StartRelay(3000)
	mark := kmsgMark(t, l.VM())
	dev, err := l.KernelConnect("rdma", fmt.Sprint(wanlab.RelayPort), wanlab.NQN)
	if err != nil {
		t.Fatalf("siw through the relay (seed %s): %v\nguest kernel:\n%s", r.Seed, err, dmesgSince(t, l.VM(), mark))
	}
	defer l.KernelDisconnect(wanlab.NQN)
	out, err := l.Sh(10*time.Minute, "wanverify -duration 15s -d "+dev+" 2>/root/wan/relay.progress")
	st, serr := r.Stats()
	if err != nil {
		prog, _ := l.Sh(time.Minute, "tail -20 /root/wan/relay.progress")
		t.Fatalf("wanverify on %s through the relay (seed %s): %v\n%s\nprogress:\n%s\nrelay %+v (%v)\nguest kernel:\n%s",
			dev, r.Seed, err, out, prog, st, serr, dmesgSince(t, l.VM(), mark))
	}
	t.Logf("siw through the relay (seed %s): %s", r.Seed, strings.TrimSpace(out))
	if serr != nil {
		t.Fatal(serr)
	}
	t.Logf("relay: %+v", st)
	if st.Conns == 0 || st.Split == 0 || st.Joined == 0 {
		t.Errorf("the relay did not re-segment siw's stream (%+v): the test proves nothing", st)
	}
	if d := dmesgSince(t, l.VM(), mark); strings.Contains(d, "siw") || strings.Contains(d, "nvme") {
		t.Logf("guest kernel during the run:\n%s", d)
	}
}
