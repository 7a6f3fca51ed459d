package wan

// The WAN lab (make wan): the lab itself is internal/testing/wanlab (also
// used by test/interop's short subset, in make test); here its own VM runs
// the matrix and the 30 s outage.
//
// Environment (all optional except NVMETD_WAN):
//
//	NVMETD_WAN=1            run (otherwise the test skips: it boots the lab VM and runs for minutes per path)
//	NVMETD_LAB_KERNEL       6.1 (default here) or 6.12
//	WAN_PATHS               path names (default: all of wanlab.Paths)
//	WAN_SYSTEMS             system names (default: all of wanlab.Systems that can run)
//	WAN_LOADS               load names (default: all of wanlab.Loads)
//	WAN_RUNTIME             seconds per load (default 20)
//	WAN_RATE                the bottleneck's rate in Mbit/s (default 20: below the emulated CPU's limit, see docs/wan.md)
//	WAN_OUTAGE              path of the outage runs ("none" to skip; default 20ms)
//	WAN_OUTAGE_HOSTS        the outage's hosts (default: nvmeof-iwarp,linux-nvme-tcp,linux-nvme-rdma)
//	WAN_OUTPUT              file the table is also written to
//
// The table (one row per path, system and load) has throughput, its ratio
// to iperf3's single stream in the same direction on the path and to the
// kernel's NVMe/TCP (nvme-tcp ⇄ nvmet-tcp) for the same load, and the
// latency percentiles.

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/wanlab"
)

func startLab(t *testing.T) *wanlab.Lab {
	return wanlab.Start(t, wanlab.Options{
		Rate:    wanlab.EnvFloat(t, "WAN_RATE", 20),
		Runtime: int(wanlab.EnvFloat(t, "WAN_RUNTIME", 20)),
	})
}

// TestWAN runs the matrix and prints the table (make wan).
func TestWAN(t *testing.T) {
	l := startLab(t)
	paths := wanlab.Pick(wanlab.Paths, wanlab.EnvList("WAN_PATHS"), wanlab.Path.Name)
	systems := wanlab.Pick(wanlab.Systems, wanlab.EnvList("WAN_SYSTEMS"), wanlab.System.Name)
	loads := wanlab.Pick(wanlab.Loads, wanlab.EnvList("WAN_LOADS"), wanlab.Load.Name)
	t.Logf("host load average at the start: %s", wanlab.Loadavg())
	var rows []wanlab.Row
	defer func() { l.PrintTable(paths, rows) }()
	for _, p := range paths {
		l.Shape(p)
		for _, s := range systems {
			rows = append(rows, l.Measure(p, s.Name(), loads)...)
			if !l.NvmetdAlive() {
				log, _ := l.Sh(time.Minute, "tail -c 6000 /root/wan/nvmetd.log")
				t.Fatalf("nvmetd exited during %s on %s; its log ends:\n%s", s.Name(), p.Name(), log)
			}
		}
	}
	for _, r := range rows {
		if r.Err() != "" && !strings.Contains(r.Err(), "iperf3 is not installed") {
			t.Errorf("%s", r.Describe())
		}
	}
}

// TestWANOutage: a 30 s link-down in the middle of a write load (the
// versioned workload, each write read back, and a full sweep at the end):
// nvmeof (Go host, iWARP, its default reconnect_delay 10 s, ctrl_loss_tmo
// 600 s, keep-alive 5 s) and the Linux host, over nvme-tcp and over
// nvme-rdma (siw), both to nvmetd with nvme connect's defaults. No I/O may
// fail and no acknowledged write may be lost; the I/O stalls and resumes.
func TestWANOutage(t *testing.T) {
	l := startLab(t)
	pname := os.Getenv("WAN_OUTAGE")
	if pname == "" {
		pname = "20ms"
	}
	if pname == "none" {
		t.Skip("WAN_OUTAGE=none")
	}
	ps := wanlab.Pick(wanlab.Paths, []string{pname}, wanlab.Path.Name)
	if len(ps) != 1 {
		t.Fatalf("WAN_OUTAGE=%s: no such path", pname)
	}
	hosts := wanlab.EnvList("WAN_OUTAGE_HOSTS")
	run := func(name string) bool { return len(hosts) == 0 || slices.Contains(hosts, name) }
	l.Shape(ps[0])
	t.Logf("host load average: %s", wanlab.Loadavg())
	if run("nvmeof-iwarp") {
		t.Run("nvmeof-iwarp", func(t *testing.T) {
			l.SetT(t)
			l.Outage("nvmeof-iwarp", "-a "+wanlab.TargetIP+":4420 -n "+wanlab.NQN, wanlab.FullOutage)
		})
	}
	for _, h := range []struct{ name, trtype, port string }{
		{"linux-nvme-tcp", "tcp", "4421"},
		{"linux-nvme-rdma", "rdma", "4420"},
	} {
		if !run(h.name) {
			continue
		}
		t.Run(h.name, func(t *testing.T) {
			l.SetT(t)
			dev, err := l.KernelConnect(h.trtype, h.port, wanlab.NQN)
			if err != nil {
				t.Fatal(err)
			}
			defer l.KernelDisconnect(wanlab.NQN)
			l.Outage(h.name, "-d "+dev, wanlab.FullOutage)
		})
	}
}
