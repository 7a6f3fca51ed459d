// Package wanlab is the WAN lab (docs/wan.md): inside the lab guest, the
// host side in the guest's root network namespace and the target side in a
// namespace "wt", joined by a veth pair (va 10.99.0.1 | vb 10.99.0.2)
// shaped in both directions with netem (delay ± jitter, loss, reordering,
// duplication) and a tbf rate below it. The hosts live in the root
// namespace because the kernel's nvme-rdma creates its rdma_cm IDs in
// init_net; siw runs on va (siw_va). The targets (nvmetd, the kernel's
// nvmet-tcp) run in wt. Test support only: test/wan runs the matrix and
// the outage (make wan), test/interop a short subset in a VM it has
// already booted (make test).
package wanlab

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The lab's names and addresses.
const (
	NQN       = "nqn.2024-01.io.nvmetd.wan:disk1"
	KernelNQN = "nqn.2024-01.io.nvmetd.wan:kernel"
	HostIP    = "10.99.0.1"
	TargetIP  = "10.99.0.2"
)

// Path is one emulated path: RTT split evenly between the directions,
// loss, reordering and duplication applied in each direction.
type Path struct {
	name          string
	rtt, jitter   time.Duration
	loss, reorder float64 // percent
	dup           float64 // percent
	reorderCorr   float64
}

var Paths = []Path{
	{name: "1ms", rtt: time.Millisecond},
	{name: "20ms", rtt: 20 * time.Millisecond, jitter: time.Millisecond, loss: 0.1},
	{name: "50ms", rtt: 50 * time.Millisecond, jitter: 2 * time.Millisecond, loss: 0.5, dup: 0.1},
	{name: "100ms", rtt: 100 * time.Millisecond, jitter: 4 * time.Millisecond, loss: 1, reorder: 1, reorderCorr: 25, dup: 0.1},
}

// Name is the path's name (WAN_PATHS).
func (p Path) Name() string { return p.name }

func (p Path) String() string {
	s := fmt.Sprintf("RTT %v ± %v, loss %.1f%%", p.rtt, p.jitter, p.loss)
	if p.reorder > 0 {
		s += fmt.Sprintf(", reorder %.0f%%", p.reorder)
	}
	if p.dup > 0 {
		s += fmt.Sprintf(", dup %.1f%%", p.dup)
	}
	return s
}

// Load is one load.
type Load struct {
	name  string
	rw    string // fio's rw
	bs    int
	depth int // 0: the bandwidth-delay product's depth
}

// Name is the load's name (WAN_LOADS).
func (ld Load) Name() string { return ld.name }

var Loads = []Load{
	{"read-qd1", "read", 128 << 10, 1},
	{"read-qd16", "read", 128 << 10, 16},
	{"read-bdp", "read", 128 << 10, 0},
	{"write-qd1", "write", 128 << 10, 1},
	{"write-qd16", "write", 128 << 10, 16},
	{"write-bdp", "write", 128 << 10, 0},
	{"randread-4k-qd1", "randread", 4096, 1},
}

// bdpDepth is the queue depth of 128 KiB I/Os that holds twice the path's
// bandwidth-delay product in flight (at least 16: never below the QD16
// Row), capped at 128 (the hosts' default queue size).
func bdpDepth(rateMbit float64, rtt time.Duration) int {
	bdp := rateMbit * 1e6 / 8 * (rtt.Seconds() + 0.002)
	return min(128, max(16, int(math.Ceil(2*bdp/(128<<10)))))
}

type System struct {
	name, description string
}

// Name is the system's name (WAN_SYSTEMS).
func (s System) Name() string { return s.name }

var Systems = []System{
	{"iperf3", "iperf3 single TCP stream (the path's capacity)"},
	{"iperf3-bbr", "iperf3 single TCP stream with BBR (-C bbr)"},
	{"nvmetd-iwarp", "nvmetd ⇄ nvmeof (Go host) over iWARP"},
	{"nvmetd-iwarp-bbr", "nvmetd ⇄ nvmeof over iWARP, BBR on both ends (port tcp_congestion: bbr, nvmeof --tcp-congestion bbr)"},
	{"nvmetd-tcp-nvmeof", "nvmetd ⇄ nvmeof -t tcp (Go host) over NVMe/TCP"},
	{"nvmetd-tcp-kernel", "nvmetd ⇄ Linux nvme-tcp"},
	{"nvmetd-siw-kernel", "nvmetd ⇄ Linux nvme-rdma over siw"},
	{"kernel-tcp", "Linux nvmet-tcp ⇄ Linux nvme-tcp (the admin's alternative)"},
}

// Row is one measurement (err: why there is none).
type Row struct {
	path, system, load string
	depth              int
	mbps               float64 // MB/s (10^6)
	p50, p99, p999     float64 // µs
	err                string
}

func EnvList(name string) []string {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return nil
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
}

func EnvFloat(t testing.TB, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return f
}

// Lab is one booted guest with the namespaces built.
type Lab struct {
	t         testing.TB
	vm        *lab.VM
	rate      float64
	runtime   int
	nvmeof    string
	nvmetd    string
	nvmeofTCP bool // nvmeof has -t tcp
	iperfOK   bool
	iperfWhy  string
	nsMiB     int
	nvmetdJob *lab.Job
}

// SetRate sets the bottleneck's rate (Mbit/s) for the next Shape.
func (l *Lab) SetRate(mbit float64) { l.rate = mbit }

// SetT points the lab's failures and logs at t (a subtest's).
func (l *Lab) SetT(t testing.TB) { l.t = t }

// VM is the guest the lab runs in.
func (l *Lab) VM() *lab.VM { return l.vm }

func (l *Lab) Sh(d time.Duration, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.vm.Exec(ctx, cmd)
}

func (l *Lab) Must(d time.Duration, cmd string) string {
	l.t.Helper()
	out, err := l.Sh(d, cmd)
	if err != nil {
		l.t.Fatalf("guest: %s: %v\n%s", cmd, err, out)
	}
	return out
}

// putIperf3 makes iperf3 runnable in the guest: the lab's initramfs has
// it (test/lab/setup.sh's BINS); with an initramfs built before that, the
// host's iperf3 and the shared libraries it links are copied into the
// guest's /host/bin (as setup.sh does, with ldd) and run with
// LD_LIBRARY_PATH=/host/bin.
func (l *Lab) putIperf3() {
	if _, err := l.Sh(time.Minute, "iperf3 --version"); err == nil {
		l.iperfOK = true // in the initramfs (test/lab/setup.sh's BINS)
		return
	}
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		l.iperfWhy = "iperf3 is not installed on the host (apt-get install iperf3): no capacity reference"
		return
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		l.iperfWhy = fmt.Sprintf("ldd %s: %v", bin, err)
		return
	}
	if _, err := l.vm.PutAs(bin, "iperf3"); err != nil {
		l.iperfWhy = err.Error()
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasPrefix(f, "/") || strings.Contains(f, "ld-linux") || strings.Contains(f, "libc.so") || strings.Contains(f, "libm.so") {
			continue
		}
		if _, err := l.vm.PutAs(f, filepath.Base(f)); err != nil {
			l.iperfWhy = err.Error()
			return
		}
	}
	if out, err := l.Sh(time.Minute, "LD_LIBRARY_PATH=/host/bin iperf3 --version"); err != nil {
		l.iperfWhy = fmt.Sprintf("iperf3 does not run in the guest: %v %s", err, out)
		return
	}
	l.iperfOK = true
}

// putModules loads veth, sch_tbf and tcp_bbr into the guest, and puts
// netem's jitter distribution table where tc looks for it. The lab's
// initramfs has both (test/lab/setup.sh's MODS); with an initramfs built
// before that, the modules are copied from the kernel package the lab
// unpacked (kroot-<release>, xz decompressed on the host) and inserted
// with insmod, and the table from the host's iproute2.
func (l *Lab) putModules() {
	t := l.t
	if _, err := l.Sh(time.Minute, "modprobe -a veth sch_tbf tcp_bbr && [ -s /usr/lib/x86_64-linux-gnu/tc/normal.dist ]"); err == nil {
		return
	}
	cache := os.Getenv("NVMETD_LAB_CACHE")
	if cache == "" {
		cache = "/var/cache/nvmetd-lab"
	}
	rel := l.vm.Release()
	dir := filepath.Join(cache, "kroot-"+rel, "lib", "modules", rel, "kernel")
	tmp := t.TempDir()
	for _, m := range []string{"drivers/net/veth", "net/sched/sch_tbf", "net/ipv4/tcp_bbr"} {
		name := filepath.Base(m) + ".ko"
		src := filepath.Join(dir, m+".ko")
		if _, err := os.Stat(src); err != nil {
			out, err := exec.Command("xz", "-dc", src+".xz").Output()
			if err != nil {
				t.Fatalf("module %s: neither %s nor %s.xz (%v): run test/lab/setup.sh", m, src, src, err)
			}
			src = filepath.Join(tmp, name)
			if err := os.WriteFile(src, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.vm.PutAs(src, "wanmod-"+name); err != nil {
			t.Fatal(err)
		}
		l.Must(time.Minute, "grep -q '^"+strings.TrimSuffix(name, ".ko")+" ' /proc/modules || insmod /host/bin/wanmod-"+name)
	}
	// netem's jitter distribution table (iproute2's, not in the initramfs).
	const dist = "/usr/lib/x86_64-linux-gnu/tc/normal.dist"
	if _, err := l.vm.PutAs(dist, "normal.dist"); err != nil {
		t.Fatalf("netem's distribution table: %v", err)
	}
	l.Must(time.Minute, "mkdir -p "+filepath.Dir(dist)+" && cp /host/bin/normal.dist "+dist)
}

// Options shapes a lab.
type Options struct {
	// Rate is the bottleneck's rate in Mbit/s (default 20: below the
	// emulated CPU's limit, docs/wan.md).
	Rate float64
	// Runtime is each load's length in seconds (default 20).
	Runtime int
	// NSMiB is each target's namespace in MiB of memory (default 64: small
	// enough for the guest's RAM, large enough that the loads do not sit
	// in one cache). The outage's sweep reads it whole at the path's rate.
	NSMiB int
	// NoKernelTarget leaves out the kernel's nvmet-tcp (the kernel-tcp
	// system) and NoIperf3 iperf3: the short subset uses neither.
	NoKernelTarget, NoIperf3 bool
}

// Start boots (or reuses) the WAN lab's own VM (NVMETD_LAB_KERNEL, 6.1 by
// default; no siw link at boot, 3 GiB) and builds the lab in it: make wan.
// It skips unless NVMETD_WAN is set.
func Start(t testing.TB, o Options) *Lab {
	t.Helper()
	if os.Getenv("NVMETD_WAN") == "" {
		t.Skip("the WAN lab boots the lab VM and runs for minutes per path: make wan (NVMETD_WAN=1)")
	}
	if testing.Short() {
		t.Skip("the WAN lab: not in -short mode")
	}
	k := os.Getenv("NVMETD_LAB_KERNEL")
	if k == "" {
		k = "6.1"
	}
	return Setup(t, lab.Start(t, lab.Options{Kernel: k, Name: "wan", SIW: []string{"none"}, MemMB: 3072}), o)
}

// Setup builds the lab in a booted guest vm: the namespace wt, the veth
// pair, siw_va, nvmetd in wt (iWARP :4420 and :4422 with bbr, NVMe/TCP
// :4421), the kernel's nvmet-tcp (:4430) and iperf3 -s unless o leaves
// them out. t's cleanup takes all of it down again (nvmetd and iperf3
// stopped, nvmet-tcp torn down, siw_va, the pair and wt deleted, the
// socket buffer limits of the root namespace restored), so that a VM shared with other
// tests (test/interop) is left as it was found.
func Setup(t testing.TB, vm *lab.VM, o Options) *Lab {
	t.Helper()
	if o.Rate == 0 {
		o.Rate = 20
	}
	if o.Runtime == 0 {
		o.Runtime = 20
	}
	if o.NSMiB == 0 {
		o.NSMiB = 64
	}
	l := &Lab{t: t, vm: vm, rate: o.Rate, runtime: o.Runtime, nsMiB: o.NSMiB}
	l.nvmeof = vm.BuildAndPut(t, "./cmd/nvmeof")
	l.nvmetd = vm.BuildAndPut(t, "./cmd/nvmetd")
	vm.BuildAndPut(t, "./internal/testing/wanverify")
	// nvmeof -t tcp: refused with "not supported" where the Go host has
	// no NVMe/TCP (a connection refused by port 1 means it has).
	out, _ := l.Sh(time.Minute, l.nvmeof+" bench -t tcp -a 127.0.0.1 -s 1 -n "+NQN+" --runtime 1s 2>&1")
	l.nvmeofTCP = !strings.Contains(out, "not supported")
	if o.NoIperf3 {
		l.iperfWhy = "iperf3 left out of this lab"
	} else {
		l.putIperf3()
	}
	l.putModules()
	limits := strings.Fields(l.Must(time.Minute, "cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max"))
	if len(limits) != 2 {
		t.Fatalf("guest: net.core.[rw]mem_max: %q", limits)
	}
	// The root namespace's tcp_[rw]mem too (wt's go with wt).
	tcpMem := strings.Split(strings.TrimSpace(l.Must(time.Minute, "cat /proc/sys/net/ipv4/tcp_rmem; cat /proc/sys/net/ipv4/tcp_wmem")), "\n")
	if len(tcpMem) != 2 {
		t.Fatalf("guest: net.ipv4.tcp_[rw]mem: %q", tcpMem)
	}
	// The teardown, registered before the build so that a build that
	// fails half-way is taken down too (every step tolerates what is not
	// there). Cleanups run last-in first-out: nvmetd's kill (below) runs
	// before this.
	t.Cleanup(func() {
		out, err := l.Sh(2*time.Minute, `I=/usr/bin/ip
[ -f /root/wan/iperf3.pid ] && kill $(cat /root/wan/iperf3.pid) 2>/dev/null
[ -n "`+map[bool]string{false: "kernel"}[o.NoKernelTarget]+`" ] && $I netns exec wt sh -c "mount -t configfs none /sys/kernel/config 2>/dev/null; export PORTID=7 NQN=`+KernelNQN+`; nvmet.sh teardown >/dev/null 2>&1"
rdma link del siw_va 2>/dev/null
$I link del va 2>/dev/null
$I netns del wt 2>/dev/null
echo `+limits[0]+` > /proc/sys/net/core/rmem_max
echo `+limits[1]+` > /proc/sys/net/core/wmem_max
echo "`+strings.Join(strings.Fields(tcpMem[0]), " ")+`" > /proc/sys/net/ipv4/tcp_rmem
echo "`+strings.Join(strings.Fields(tcpMem[1]), " ")+`" > /proc/sys/net/ipv4/tcp_wmem
rm -rf /root/wan
! $I netns list | grep -qw wt`)
		if err != nil {
			t.Errorf("WAN lab teardown: %v\n%s", err, out)
		}
	})
	// The namespaces and the veth pair; siw on the host side. (The guest's
	// busybox sh runs its own applets for bare ip and tc, which know no
	// namespaces or netem: the full paths are iproute2's.)
	l.Must(time.Minute, `set -e
I=/usr/bin/ip
$I netns del wt 2>/dev/null || true
$I link del va 2>/dev/null || true
$I netns add wt
$I link add va type veth peer name vb
$I link set vb netns wt
$I addr add `+HostIP+`/24 dev va
$I link set va up
$I -n wt addr add `+TargetIP+`/24 dev vb
$I -n wt link set vb up
$I -n wt link set lo up
modprobe siw; modprobe nvme-rdma; modprobe nvme-tcp; modprobe nvmet-tcp; modprobe sch_netem
rdma link del siw_va 2>/dev/null || true
rdma link add siw_va type siw netdev va
# Buffers for the largest BDP (net.core's are global; tcp_[rw]mem per
# namespace).
echo 67108864 > /proc/sys/net/core/rmem_max
echo 67108864 > /proc/sys/net/core/wmem_max
for ns in "" "$I netns exec wt"; do
  $ns sh -c 'echo "4096 131072 33554432" > /proc/sys/net/ipv4/tcp_rmem; echo "4096 65536 33554432" > /proc/sys/net/ipv4/tcp_wmem'
done
mkdir -p /root/wan`)
	// nvmetd in wt: iWARP on 4420, NVMe/TCP on 4421, one memory namespace.
	cfg := fmt.Sprintf(`daemon:
  data_dir: /root/wan/nvmetd
  control_socket: /root/wan/nvmetd.sock
  log_level: warn
ports:
  - {id: 1, address: %[1]s, service_id: 4420, transport: rdma, subsystems: [%[2]s]}
  - {id: 2, address: %[1]s, service_id: 4421, transport: tcp, subsystems: [%[2]s]}
  - {id: 3, address: %[1]s, service_id: 4422, transport: rdma, tcp_congestion: bbr, subsystems: [%[2]s]}
subsystems:
  - nqn: %[2]s
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: %[3]dMiB}}
`, TargetIP, NQN, l.nsMiB)
	l.Must(time.Minute, "cat > /root/wan/nvmetd.yaml <<'EOF'\n"+cfg+"EOF")
	// A background job without a deadline is killed after the harness's
	// DefaultExecTimeout (5 min): nvmetd lives as long as the test.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Hour)
	t.Cleanup(cancel)
	l.nvmetdJob = vm.Background(ctx, "exec /usr/bin/ip netns exec wt "+l.nvmetd+" --config /root/wan/nvmetd.yaml >/root/wan/nvmetd.log 2>&1")
	t.Cleanup(l.nvmetdJob.Kill)
	l.Must(2*time.Minute, "for i in $(seq 600); do /usr/bin/ip netns exec wt ss -ltn | grep -q ':4421 ' && exit 0; sleep 0.2; done; exit 1")
	// The kernel's nvmet-tcp in wt (its listening socket is created in
	// the namespace of the process that enables the port; ip netns exec
	// gives it a /sys without configfs, mounted again here).
	if !o.NoKernelTarget {
		l.Must(2*time.Minute, fmt.Sprintf(`/usr/bin/ip netns exec wt sh -c "mount -t configfs none /sys/kernel/config 2>/dev/null; export TRTYPE=tcp TRADDR=%s TRSVCID=4430 PORTID=7 NQN=%s BACKEND=nullb-mem SIZE_MB=%d; nvmet.sh teardown >/dev/null 2>&1; nvmet.sh setup"`,
			TargetIP, KernelNQN, l.nsMiB))
	}
	if l.iperfOK {
		l.Must(time.Minute, "/usr/bin/ip netns exec wt env LD_LIBRARY_PATH=/host/bin iperf3 -s -D -p 5201 -I /root/wan/iperf3.pid")
	}
	return l
}

// NvmetdAlive reports whether nvmetd still runs.
func (l *Lab) NvmetdAlive() bool {
	select {
	case <-l.nvmetdJob.Done():
		return false
	default:
		return true
	}
}

// shape sets path p on both directions with rate as tbf's rate below
// netem (netem's limit holds far more than the BDP in packets).
func (l *Lab) Shape(p Path) {
	l.t.Helper()
	half := p.rtt / 2
	netem := fmt.Sprintf("netem limit 100000 delay %dus", half.Microseconds())
	if p.jitter > 0 {
		netem += fmt.Sprintf(" %dus distribution normal", (p.jitter / 2).Microseconds())
	}
	if p.loss > 0 {
		netem += fmt.Sprintf(" loss %.2f%%", p.loss)
	}
	if p.dup > 0 {
		netem += fmt.Sprintf(" duplicate %.2f%%", p.dup)
	}
	if p.reorder > 0 {
		netem += fmt.Sprintf(" reorder %.2f%% %.0f%%", p.reorder, p.reorderCorr)
	}
	// tbf's queue: 200 ms at the rate (a deep buffer of a WAN router).
	burst := max(32<<10, int(l.rate*1e6/8/250))
	tbf := fmt.Sprintf("tbf rate %.0fmbit burst %d latency 200ms", l.rate, burst)
	for _, tc := range []string{"/usr/sbin/tc qdisc %s dev va", "/usr/bin/ip netns exec wt /usr/sbin/tc qdisc %s dev vb"} {
		l.Must(time.Minute, fmt.Sprintf(tc, "del")+" root 2>/dev/null; "+fmt.Sprintf(tc, "add")+" root handle 1: "+netem+" && "+fmt.Sprintf(tc, "add")+" parent 1:1 handle 10: "+tbf)
	}
	out := l.Must(time.Minute, "ping -c 3 -i 0.3 "+TargetIP+" | tail -1")
	l.t.Logf("path %s: %s; ping: %s", p.name, p, strings.TrimSpace(out))
}

func (l *Lab) fio(dev string, ld Load, depth int) (Row, error) {
	cmd := fmt.Sprintf("fio --name=wan --filename=%s --rw=%s --bs=%d --iodepth=%d --ioengine=libaio --direct=1 --time_based --runtime=%d --ramp_time=2 --size=%dM --percentile_list=50:99:99.9 --output-format=json",
		dev, ld.rw, ld.bs, depth, l.runtime, l.nsMiB)
	out, err := l.Sh(time.Duration(l.runtime+120)*time.Second, cmd)
	if err != nil {
		return Row{}, fmt.Errorf("fio: %v: %s", err, out)
	}
	// fio's JSON has "read" and "write": decode both by name.
	var raw struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	if i := strings.Index(out, "{"); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw.Jobs) == 0 {
		return Row{}, fmt.Errorf("fio output: %v", err)
	}
	dir := "read"
	if ld.rw == "write" {
		dir = "write"
	}
	var st struct {
		BWBytes float64 `json:"bw_bytes"`
		CLat    struct {
			Percentile map[string]float64 `json:"percentile"`
		} `json:"clat_ns"`
	}
	if err := json.Unmarshal(raw.Jobs[0][dir], &st); err != nil {
		return Row{}, err
	}
	pc := st.CLat.Percentile
	return Row{mbps: st.BWBytes / 1e6, p50: pc["50.000000"] / 1e3, p99: pc["99.000000"] / 1e3, p999: pc["99.900000"] / 1e3}, nil
}

type benchJSON struct {
	Total struct {
		Bytes   float64 `json:"bytes"`
		P50     float64 `json:"lat_p50_us"`
		P99     float64 `json:"lat_p99_us"`
		P999    float64 `json:"lat_p99_9_us"`
		MiBps   float64 `json:"mib_per_s"`
		IOPS    float64 `json:"iops"`
		LatMean float64 `json:"lat_mean_us"`
	} `json:"total"`
	Errors uint64 `json:"errors"`
	First  string `json:"first_error"`
}

func (l *Lab) bench(args string, ld Load, depth int) (Row, error) {
	cmd := fmt.Sprintf("%s bench %s -n %s --rw %s --bs %d --iodepth %d --runtime %ds --size %dm --force -o json",
		l.nvmeof, args, NQN, ld.rw, ld.bs, depth, l.runtime, l.nsMiB)
	out, err := l.Sh(time.Duration(l.runtime+180)*time.Second, cmd)
	if err != nil {
		return Row{}, fmt.Errorf("nvmeof bench: %v: %s", err, out)
	}
	if i := strings.Index(out, "{"); i >= 0 {
		out = out[i:]
	}
	var b benchJSON
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		return Row{}, fmt.Errorf("nvmeof bench output: %v: %s", err, out)
	}
	r := Row{mbps: b.Total.MiBps * (1 << 20) / 1e6, p50: b.Total.P50, p99: b.Total.P99, p999: b.Total.P999}
	if b.Errors > 0 {
		r.err = fmt.Sprintf("%d errors (%s)", b.Errors, b.First)
	}
	return r, nil
}

// iperf runs one iperf3 single stream on the current path. A run whose
// JSON carries an error, or reports nothing received, is an error and
// its JSON is kept (next to WAN_OUTPUT, else in the test log): a 0.0 MB/s
// Row must never pass for a capacity (docs/wan.md, Left to do).
func (l *Lab) iperf(path string, write, bbr bool) (Row, error) {
	rev := " -R"
	dir := "read"
	if write {
		rev, dir = "", "write"
	}
	if bbr {
		rev += " -C bbr"
	}
	out, err := l.Sh(time.Duration(l.runtime+120)*time.Second, fmt.Sprintf("LD_LIBRARY_PATH=/host/bin iperf3 -c %s -p 5201 -t %d -O 2 -J%s", TargetIP, l.runtime, rev))
	raw := out
	if i := strings.Index(out, "{"); i >= 0 {
		raw = out[i:]
	}
	var j struct {
		Error string `json:"error"`
		End   struct {
			Recv struct {
				Bytes float64 `json:"bytes"`
				BPS   float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sent struct {
				Bytes float64 `json:"bytes"`
				BPS   float64 `json:"bits_per_second"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	jerr := json.Unmarshal([]byte(raw), &j)
	switch {
	case err != nil:
		err = fmt.Errorf("iperf3: %v", err)
	case jerr != nil:
		err = fmt.Errorf("iperf3: its JSON: %v", jerr)
	case j.Error != "":
		err = fmt.Errorf("iperf3: %s", j.Error)
	case j.End.Recv.BPS <= 0:
		err = fmt.Errorf("iperf3: nothing received (sum_received %.0f bytes, sum_sent %.0f bytes at %.0f bit/s)",
			j.End.Recv.Bytes, j.End.Sent.Bytes, j.End.Sent.BPS)
	}
	if err != nil {
		l.keepJSON(fmt.Sprintf("iperf3-%s-%s%s.json", path, dir, map[bool]string{true: "-bbr"}[bbr]), raw)
		return Row{}, err
	}
	return Row{mbps: j.End.Recv.BPS / 8 / 1e6}, nil
}

// keepJSON keeps a failed tool's output next to WAN_OUTPUT, or in the
// test log when WAN_OUTPUT is unset.
func (l *Lab) keepJSON(name, raw string) {
	if f := os.Getenv("WAN_OUTPUT"); f != "" {
		p := filepath.Join(filepath.Dir(f), name)
		if err := os.WriteFile(p, []byte(raw), 0o644); err == nil {
			l.t.Logf("kept %s", p)
			return
		}
	}
	if len(raw) > 4000 {
		raw = raw[:2000] + "\n...\n" + raw[len(raw)-2000:]
	}
	l.t.Logf("%s:\n%s", name, raw)
}

// KernelConnect connects the Linux host and returns its block device.
func (l *Lab) KernelConnect(trtype, port, nqn string) (string, error) {
	out, err := l.Sh(3*time.Minute, fmt.Sprintf(`set -e
nvme connect -t %s -a %s -s %s -n %s >/dev/null
for i in $(seq 300); do
  for b in /sys/block/nvme*; do
    case ${b##*/} in nvme*c*n*) continue;; esac # a multipath head's hidden path
    [ -e "$b/device/subsysnqn" ] || continue
    if [ "$(cat $b/device/subsysnqn)" = %s ]; then echo /dev/${b##*/}; exit 0; fi
  done
  sleep 0.2
done
exit 1`, trtype, TargetIP, port, nqn, nqn))
	if err != nil {
		return "", fmt.Errorf("nvme connect -t %s %s:%s: %v %s", trtype, TargetIP, port, err, out)
	}
	return strings.TrimSpace(out), nil
}

func (l *Lab) KernelDisconnect(nqn string) {
	_, _ = l.Sh(2*time.Minute, "nvme disconnect -n "+nqn)
}

// Measure runs every load of loads for system sys on the current path.
func (l *Lab) Measure(p Path, sys string, loads []Load) []Row {
	var rows []Row
	add := func(ld Load, depth int, r Row, err error) {
		r.path, r.system, r.load, r.depth = p.name, sys, ld.name, depth
		if err != nil {
			r.err = err.Error()
			l.t.Logf("%s %s %s: %v", p.name, sys, ld.name, err)
		}
		rows = append(rows, r)
	}
	depthOf := func(ld Load) int {
		if ld.depth == 0 {
			return bdpDepth(l.rate, p.rtt)
		}
		return ld.depth
	}
	switch sys {
	case "iperf3", "iperf3-bbr":
		if !l.iperfOK {
			add(Load{name: "read"}, 1, Row{}, fmt.Errorf("%s", l.iperfWhy))
			return rows
		}
		for _, w := range []bool{false, true} {
			r, err := l.iperf(p.name, w, sys == "iperf3-bbr")
			add(Load{name: map[bool]string{false: "read", true: "write"}[w]}, 1, r, err)
		}
		return rows
	case "nvmetd-iwarp", "nvmetd-iwarp-bbr", "nvmetd-tcp-nvmeof":
		args := "-a " + TargetIP + " -s 4420"
		if sys == "nvmetd-iwarp-bbr" {
			args = "-a " + TargetIP + " -s 4422 --tcp-congestion bbr"
		}
		if sys == "nvmetd-tcp-nvmeof" {
			if !l.nvmeofTCP {
				return nil // the Go host has no NVMe/TCP in this tree
			}
			args = "-t tcp -a " + TargetIP + " -s 4421"
		}
		for _, ld := range loads {
			d := depthOf(ld)
			r, err := l.bench(args, ld, d)
			add(ld, d, r, err)
		}
		return rows
	}
	trtype, port, nqn := "tcp", "4421", NQN
	switch sys {
	case "nvmetd-siw-kernel":
		trtype, port = "rdma", "4420"
	case "kernel-tcp":
		port, nqn = "4430", KernelNQN
	}
	dev, err := l.KernelConnect(trtype, port, nqn)
	if err != nil {
		add(Load{name: "connect"}, 0, Row{}, err)
		return rows
	}
	defer l.KernelDisconnect(nqn)
	for _, ld := range loads {
		d := depthOf(ld)
		r, err := l.fio(dev, ld, d)
		add(ld, d, r, err)
	}
	return rows
}

// table renders rows with the ratios to iperf3 (same path, same
// direction) and to the kernel's NVMe/TCP (same path and load).
func Table(rows []Row) string {
	find := func(path, sys, load string) *Row {
		for i := range rows {
			if rows[i].path == path && rows[i].system == sys && rows[i].load == load && rows[i].err == "" {
				return &rows[i]
			}
		}
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| path | system | load | QD | MB/s | ×iperf3 | ×kernel TCP | p50 µs | p99 µs | p99.9 µs | note |\n")
	fmt.Fprintf(&b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	ratio := func(a float64, r *Row) string {
		if r == nil || r.mbps == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/r.mbps)
	}
	lat := func(v float64) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | %d | – | – | – | – | – | – | %s |\n", r.path, r.system, r.load, r.depth, strings.ReplaceAll(firstLine(r.err), "|", "/"))
			continue
		}
		dir := "read"
		if strings.HasPrefix(r.load, "write") {
			dir = "write"
		}
		ip, kt := "–", "–"
		if !strings.HasPrefix(r.system, "iperf3") && !strings.HasPrefix(r.load, "randread") {
			ip = ratio(r.mbps, find(r.path, "iperf3", dir))
		}
		if !strings.HasPrefix(r.system, "iperf3") && r.system != "kernel-tcp" {
			kt = ratio(r.mbps, find(r.path, "kernel-tcp", r.load))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %s | %s | %s | %s | %s | |\n", r.path, r.system, r.load, r.depth, r.mbps, ip, kt, lat(r.p50), lat(r.p99), lat(r.p999))
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func Pick[T any](all []T, names []string, name func(T) string) []T {
	if len(names) == 0 {
		return all
	}
	var out []T
	for _, x := range all {
		if slices.Contains(names, name(x)) {
			out = append(out, x)
		}
	}
	return out
}

func Loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// PrintTable prints the table of rows (also when the matrix stopped
// early) and writes it to WAN_OUTPUT.
func (l *Lab) PrintTable(paths []Path, rows []Row) {
	t := l.t
	tab := Table(rows)
	hdr := fmt.Sprintf("WAN matrix: Linux %s guest under TCG, bottleneck %.0f Mbit/s (tbf), %d s per load; host load average at the end: %s\n\n",
		l.vm.Release(), l.rate, l.runtime, Loadavg())
	for _, p := range paths {
		hdr += fmt.Sprintf("- path %s: %s (each direction: delay RTT/2, the loss, reordering and duplication)\n", p.name, p)
	}
	fmt.Println(hdr + "\n" + tab)
	if f := os.Getenv("WAN_OUTPUT"); f != "" {
		if err := os.WriteFile(f, []byte(hdr+"\n"+tab), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// Outage is one outage run's shape: the link goes down Before after the
// first write was acknowledged and comes back Down later; wanverify runs
// at least Duration, and on until more writes than it has writers were
// acknowledged after the link came back (so at least one issued after it;
// bounded by 10 minutes): a run never ends before the host could resume.
type Outage struct {
	Before, Down, Duration time.Duration
}

// FullOutage is make wan's: 30 s down from t ≈ 20 s, 90 s of load.
var FullOutage = Outage{Before: 20 * time.Second, Down: 30 * time.Second, Duration: 90 * time.Second}

// OutageResult is wanverify's result (internal/testing/wanverify) with the
// link's times on the guest's clock.
type OutageResult struct {
	Writes, Reads, Errors                   int64
	LongestStall, StallStart                float64
	StartUnix, StallStartUnix, StallEndUnix float64
	LastWriteUnix                           float64
	Resumed                                 bool
	Reconnects                              int
	Sweep                                   string
	SweepOK                                 bool
	FirstErrors                             []string `json:"first_errors"`
	// LinkDownUnix and LinkUpUnix: when the link went down and came back
	// (the guest's clock, the one wanverify stamps with).
	LinkDownUnix, LinkUpUnix float64 `json:"-"`
}

// ResumedAfter is how long after the link came back I/O resumed (the end of the
// longest stall), and Stalled how long after the link went down it began.
func (r OutageResult) ResumedAfter() float64 { return r.StallEndUnix - r.LinkUpUnix }
func (r OutageResult) Stalled() float64      { return r.StallStartUnix - r.LinkDownUnix }

// Outage runs wanverify (the versioned workload, 8 writers, each 4 KiB
// write read back, then a full sweep) with args (-a ADDR -n NQN for
// nvmeof's host, -d DEV for the Linux host's block device) and takes the
// path's link down during it as o says: the target side's veth (vb) goes
// down, so the host side (va) loses its carrier and every packet of both
// directions is lost; the hosts' routes stay (flagged linkdown). It fails
// t if an I/O failed, the sweep found a lost acknowledged write, or the
// I/O did not resume after the link came back (wanverify's Resumed); the times (stall,
// resume) are logged, not asserted.
func (l *Lab) Outage(name, args string, o Outage) OutageResult {
	t := l.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	l.Must(time.Minute, "rm -f /root/wan/"+name+".up")
	job := l.vm.Background(ctx, fmt.Sprintf("wanverify -duration %s -resume-file /root/wan/%s.up %s 2>/root/wan/%s.progress", o.Duration, name, args, name))
	defer job.Kill()
	// Before counts from wanverify's first acknowledged write (its
	// connect and start take seconds under TCG), polled in its progress.
	if out, err := l.Sh(5*time.Minute, "for i in $(seq 2400); do grep -q 'writes=[1-9]' /root/wan/"+name+".progress 2>/dev/null && exit 0; sleep 0.1; done; cat /root/wan/"+name+".progress; exit 1"); err != nil {
		t.Fatalf("%s: wanverify acknowledged no write: %v\n%s", name, err, out)
	}
	time.Sleep(o.Before)
	// The link's times come from the guest's clock, the clock wanverify
	// stamps its stall with (docs/wan.md, Recovery through an outage),
	// read just before and just after the command (starting wanverify
	// -clock takes a fraction of a second under TCG). The link went down
	// at the latest at the second stamp and came up at the earliest at
	// the first: a write acknowledged after "up" was acknowledged after
	// the link came back.
	guestNow := func(cmd string) (before, after float64) {
		out := l.Must(time.Minute, "wanverify -clock && "+cmd+" && wanverify -clock")
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("guest clock around %q: %q", cmd, out)
		}
		var err error
		if before, err = strconv.ParseFloat(f[0], 64); err == nil {
			after, err = strconv.ParseFloat(f[1], 64)
		}
		if err != nil {
			t.Fatalf("guest clock around %q: %q: %v", cmd, out, err)
		}
		return before, after
	}
	// The link comes back up whatever happens, or the next run finds no route.
	defer l.Sh(time.Minute, "/usr/bin/ip -n wt link set vb up")
	_, down := guestNow("/usr/bin/ip -n wt link set vb down")
	time.Sleep(o.Down)
	up, _ := guestNow("/usr/bin/ip -n wt link set vb up")
	l.Must(time.Minute, fmt.Sprintf("echo %.6f > /root/wan/%s.up", up, name))
	select {
	case <-job.Done():
	case <-time.After(20 * time.Minute):
		t.Fatalf("%s: wanverify did not finish", name)
	}
	out, err := job.Wait()
	progress, _ := l.Sh(time.Minute, "cat /root/wan/"+name+".progress")
	var res OutageResult
	if i := strings.LastIndex(out, "{"); i >= 0 {
		_ = json.Unmarshal([]byte(out[i:]), &res)
	}
	res.LinkDownUnix, res.LinkUpUnix = down, up
	t.Logf("%s: link down for %.1f s (guest clock); result %s", name, up-down, strings.TrimSpace(out))
	if err != nil || res.Errors > 0 || !res.SweepOK {
		t.Errorf("%s through the outage: %v; errors %d %v; sweep ok %v: %s\nprogress:\n%s", name, err, res.Errors, res.FirstErrors, res.SweepOK, res.Sweep, progress)
		return res
	}
	if !res.Resumed || res.LastWriteUnix <= up {
		t.Errorf("%s: the I/O did not resume after the link came back: no more than one write per writer acknowledged after it in wanverify's 10 min bound (the last write %.1f s after the link came back)\nprogress:\n%s",
			name, res.LastWriteUnix-up, progress)
	}
	t.Logf("%s: %d writes, %d reads back, 0 errors, longest stall %.1f s (from t=%.1f s), %d reconnects; sweep: %s",
		name, res.Writes, res.Reads, res.LongestStall, res.StallStart, res.Reconnects, res.Sweep)
	// wanverify's progress (one line a second), for reading the outage
	// by eye: the writes acknowledged while the link was down, if any.
	t.Logf("%s: progress:\n%s", name, progress)
	if k, err := l.Sh(time.Minute, "dmesg | grep -iE 'nvme|usable path|siw' | tail -40; date"); err == nil {
		t.Logf("%s: the guest kernel's nvme lines (the guest's clock):\n%s", name, k)
	}
	// Measured, not asserted (the guest runs under TCG): when the stall
	// began against the link going down, and when I/O resumed against the
	// link coming back (the goal: within reconnect_delay, 10 s).
	if res.StallEndUnix > 0 {
		t.Logf("%s: link down at t=%.1f s, up at t=%.1f s (wanverify's clock); the stall began %+.1f s from the link going down and I/O resumed %.1f s after the link came back",
			name, down-res.StartUnix, up-res.StartUnix, res.Stalled(), res.ResumedAfter())
	}
	return res
}

// Err is why the row has no measurement ("" if it has one).
func (r Row) Err() string { return r.err }

// Describe is the row in one line, for a log.
func (r Row) Describe() string {
	if r.err != "" {
		return fmt.Sprintf("%s %s %s QD%d: %s", r.path, r.system, r.load, r.depth, r.err)
	}
	return fmt.Sprintf("%s %s %s QD%d: %.2f MB/s, p50 %.0f µs, p99 %.0f µs", r.path, r.system, r.load, r.depth, r.mbps, r.p50, r.p99)
}

// RelayPort is the port of the re-segmenting relay (StartRelay) on
// TargetIP, in front of nvmetd's iWARP port 4420.
const RelayPort = 4423

// Relay is internal/testing/wanrelay running in wt.
type Relay struct {
	l    *Lab
	job  *lab.Job
	Seed string
}

// RelayStats is the relay's counts (internal/testing/relay.Stats).
type RelayStats struct {
	Conns, Refused, Bytes, Writes, Reads, Split, Joined int64
}

// StartRelay starts the re-segmenting relay (internal/testing/relay, as
// the wanrelay command) in wt on TargetIP:RelayPort, relaying to nvmetd's
// iWARP port (TargetIP:4420): writes of 1 to maxWrite bytes, each its own
// segment, up to 2 ms of coalescing, pauses of up to 200 µs. A host that
// connects to RelayPort crosses the shaped path and then the relay. t's
// cleanup stops it.
func (l *Lab) StartRelay(maxWrite int) *Relay {
	t := l.t
	t.Helper()
	bin := l.vm.BuildAndPut(t, "./internal/testing/wanrelay")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Hour)
	t.Cleanup(cancel)
	r := &Relay{l: l}
	r.job = l.vm.Background(ctx, fmt.Sprintf("exec /usr/bin/ip netns exec wt %s -listen %s:%d -target %s:4420 -max-write %d -stats /root/wan/relay.stats >/root/wan/relay.log 2>&1",
		bin, TargetIP, RelayPort, TargetIP, maxWrite))
	t.Cleanup(r.job.Kill)
	out := l.Must(2*time.Minute, "for i in $(seq 600); do grep -q '^listening' /root/wan/relay.log && exec cat /root/wan/relay.log; sleep 0.2; done; cat /root/wan/relay.log; exit 1")
	_, r.Seed, _ = strings.Cut(strings.TrimSpace(out), "seed ")
	t.Logf("relay in wt: %s", strings.TrimSpace(out))
	return r
}

// Stats reads the relay's counts (written every second).
func (r *Relay) Stats() (RelayStats, error) {
	var st RelayStats
	out, err := r.l.Sh(time.Minute, "sleep 1.2; cat /root/wan/relay.stats")
	if err != nil {
		return st, fmt.Errorf("relay stats: %v: %s", err, out)
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &st); err != nil {
		return st, fmt.Errorf("relay stats %q: %v", out, err)
	}
	return st, nil
}
