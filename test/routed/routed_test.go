// Package routed tests the initiator over routed IP: a host network
// namespace and a target network namespace on two subnets joined by a router
// namespace, built with ip netns for each test and removed afterwards. nvmetd
// runs in the target namespace; nvmeof discovers, connects, mounts (FUSE,
// loop device, ext4), writes and verifies from the host namespace, across
// the router — with jumbo frames, with a 1500-byte MTU (FPDUs no larger than
// the MSS), with path MTU discovery through a 1500-byte router, and through
// a 20 mbit/s token bucket.
package routed

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nvmetd/nvmetd/internal/pcapstream"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	hostAddr   = "10.77.1.2"
	routerHost = "10.77.1.1"
	routerTgt  = "10.77.2.1"
	tgtAddr    = "10.77.2.2"
	nqn        = "nqn.2024-01.io.nvmetd.routed:disk1"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (nvmeof, nvmetd string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "routed-bin"); buildErr != nil {
			return
		}
		for _, p := range []string{"../../cmd/nvmeof", "../../cmd/nvmetd"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, filepath.Base(p)), p).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", p, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "nvmeof"), filepath.Join(binDir, "nvmetd")
}

// need skips the test, saying exactly why, when it cannot run here.
func need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("routed network namespace test: skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (ip netns), veth pairs, tc qdiscs, mounts FUSE and ext4 and attaches loop devices")
	}
	for _, tool := range []string{"ip", "tc", "nsenter", "losetup", "mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
}

// topo is the three namespaces of one test.
type topo struct {
	t                    *testing.T
	host, router, target string
	dir, state           string
	nvmeof, nvmetd       string
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newTopo builds host (10.77.1.2) — router (10.77.1.1 | 10.77.2.1) —
// target (10.77.2.2) with links of MTU linkMTU. If routeMTU is set, the
// router's routes have that MTU: it forwards nothing larger and answers
// bigger packets with ICMP "fragmentation needed" (path MTU discovery).
func newTopo(t *testing.T, linkMTU, routeMTU int) *topo {
	t.Helper()
	need(t)
	nvmeofBin, nvmetdBin := binaries(t)
	id := fmt.Sprintf("%04x", mrand.Uint32()&0xffff)
	tp := &topo{t: t, host: "nvt-h-" + id, router: "nvt-r-" + id, target: "nvt-t-" + id, nvmeof: nvmeofBin, nvmetd: nvmetdBin}
	var err error
	if tp.dir, err = os.MkdirTemp("", "routed"); err != nil {
		t.Fatal(err)
	}
	tp.state = filepath.Join(tp.dir, "run")
	t.Cleanup(tp.destroy)
	for _, ns := range []string{tp.host, tp.router, tp.target} {
		sh(t, "ip", "netns", "add", ns)
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	// The veth ends are created inside the namespaces, so their names never
	// meet in the root namespace.
	sh(t, "ip", "link", "add", "h0", "netns", tp.host, "type", "veth", "peer", "name", "r1", "netns", tp.router)
	sh(t, "ip", "link", "add", "r2", "netns", tp.router, "type", "veth", "peer", "name", "t0", "netns", tp.target)
	link := func(ns, dev, addr string, mtu int) {
		sh(t, "ip", "-n", ns, "link", "set", dev, "mtu", fmt.Sprint(mtu))
		sh(t, "ip", "-n", ns, "addr", "add", addr, "dev", dev)
		sh(t, "ip", "-n", ns, "link", "set", dev, "up")
	}
	link(tp.host, "h0", hostAddr+"/24", linkMTU)
	link(tp.router, "r1", routerHost+"/24", linkMTU)
	link(tp.router, "r2", routerTgt+"/24", linkMTU)
	link(tp.target, "t0", tgtAddr+"/24", linkMTU)
	if routeMTU > 0 {
		sh(t, "ip", "-n", tp.router, "route", "replace", "10.77.1.0/24", "dev", "r1", "mtu", fmt.Sprint(routeMTU))
		sh(t, "ip", "-n", tp.router, "route", "replace", "10.77.2.0/24", "dev", "r2", "mtu", fmt.Sprint(routeMTU))
	}
	sh(t, "ip", "-n", tp.host, "route", "add", "default", "via", routerHost)
	sh(t, "ip", "-n", tp.target, "route", "add", "default", "via", routerTgt)
	sh(t, "ip", "netns", "exec", tp.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return tp
}

// destroy removes everything the test made, even after a failure.
func (tp *topo) destroy() {
	_, _ = tp.cli("disconnect-all", "--force")
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], tp.dir) {
			_ = exec.Command("umount", "-l", f[1]).Run()
		}
	}
	if out, err := exec.Command("losetup", "-a").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, tp.dir) {
				_ = exec.Command("losetup", "-d", strings.TrimSuffix(strings.Fields(l)[0], ":")).Run()
			}
		}
	}
	for _, ns := range []string{tp.host, tp.router, tp.target} {
		// Processes left in a namespace keep it alive; ours are gone by now.
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	os.RemoveAll(tp.dir)
}

// cli runs nvmeof in the host's network namespace. nsenter --net keeps the
// root mount namespace (ip netns exec would give every command a private
// one, and the daemon's FUSE and ext4 mounts would be invisible to the rest).
func (tp *topo) cli(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + tp.host, "--", tp.nvmeof}, args...)...)
	cmd.Env = append(os.Environ(), "NVMEOF_STATE_DIR="+tp.state)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("nvmeof %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func (tp *topo) must(args ...string) string {
	tp.t.Helper()
	out, err := tp.cli(args...)
	if err != nil {
		tp.t.Fatal(err)
	}
	return out
}

type ctrlInfo struct {
	Device, State string
	Reconnects    int
	Namespaces    []struct {
		Loop, Mount string `json:",omitempty"`
	}
}

func (tp *topo) list() []ctrlInfo {
	tp.t.Helper()
	var l struct{ Controllers []ctrlInfo }
	if err := json.Unmarshal([]byte(tp.must("list", "-o", "json")), &l); err != nil {
		tp.t.Fatal(err)
	}
	return l.Controllers
}

// startTarget runs nvmetd in the target namespace on 10.77.2.2:4420 with a
// file namespace.
func (tp *topo) startTarget(size string) {
	t := tp.t
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
ports:
  - id: 1
    address: %s
    service_id: 4420
    subsystems: [%s]
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: {kind: file, path: %s, size: %s}
`, filepath.Join(tp.dir, "nvmetd.sock"), tgtAddr, nqn, nqn, filepath.Join(tp.dir, "ns1.img"), size)
	cfgPath := filepath.Join(tp.dir, "nvmetd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(tp.dir, "nvmetd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", tp.target, tp.nvmetd, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("nvmetd log:\n%s", b)
			logs, _ := filepath.Glob(filepath.Join(tp.state, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	for deadline := time.Now().Add(hang); ; time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", tp.target, "ss", "-ltnH", "sport", "= :4420").Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("nvmetd exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmetd does not listen after %v", hang)
		}
	}
}

// cycle is the test proper: discover across the router, connect and mount
// (mkfs), write a tree of files and a large file, verify, disconnect,
// reconnect, verify, and a verified bench through the daemon.
func (tp *topo) cycle(bigMiB int) {
	t := tp.t
	out := tp.must("discover", "-t", "rdma", "-a", tgtAddr, "-s", "4420")
	if !strings.Contains(out, "subnqn:  "+nqn) || !strings.Contains(out, "traddr:  "+tgtAddr) {
		t.Fatalf("discover across the router:\n%s", out)
	}
	mnt := filepath.Join(tp.dir, "mnt")
	tp.must("connect", "-t", "rdma", "-a", tgtAddr, "-s", "4420", "-n", nqn, "--mount", mnt, "--mkfs")
	sums := map[string][32]byte{}
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := 0; i < 120; i++ {
		rel := filepath.Join(fmt.Sprintf("d%d", i%5), fmt.Sprintf("f%03d", i))
		data := make([]byte, rng.IntN(200<<10)+1)
		rand.Read(data)
		writeSync(t, filepath.Join(mnt, rel), data)
		sums[rel] = sha256.Sum256(data)
	}
	big := make([]byte, bigMiB<<20)
	rand.Read(big)
	start := time.Now()
	writeSync(t, filepath.Join(mnt, "big"), big)
	t.Logf("%d MiB written and fsynced across the router in %v", bigMiB, time.Since(start).Round(time.Millisecond))
	sums["big"] = sha256.Sum256(big)
	verify(t, mnt, sums)
	tp.must("disconnect", "-n", nqn)
	tp.must("connect", "-a", tgtAddr, "-s", "4420", "-n", nqn, "--mount", mnt)
	start = time.Now()
	verify(t, mnt, sums)
	t.Logf("verified after reconnect in %v", time.Since(start).Round(time.Millisecond))
	l := tp.list()
	if len(l) != 1 || l[0].State != "live" || l[0].Reconnects != 0 {
		t.Fatalf("list: %+v", l)
	}
	tp.must("disconnect", "-d", l[0].Device)
}

func writeSync(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func verify(t *testing.T, root string, sums map[string][32]byte) {
	t.Helper()
	for rel, want := range sums {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if sha256.Sum256(b) != want {
			t.Fatalf("%s: content differs", rel)
		}
	}
}

// TestRouted: jumbo frames (9000) on every link.
func TestRouted(t *testing.T) {
	tp := newTopo(t, 9000, 0)
	tp.startTarget("256MiB")
	tp.cycle(32)
}

// TestRoutedMTU1500: a 1500-byte MTU on every link, so the MSS is 1448 and
// the engine's FPDUs (sized to the MSS, as siw does) must not exceed it;
// a capture on the router checks every FPDU of every connection.
func TestRoutedMTU1500(t *testing.T) {
	tp := newTopo(t, 1500, 0)
	tp.startTarget("256MiB")
	tp.cycle(32)
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Logf("no tcpdump (%v): FPDU sizes not checked", err)
		return
	}
	// A short capture of a fresh connection and some I/O.
	pcap := filepath.Join(tp.dir, "r1.pcap")
	// A 256 MiB capture buffer holds all of the few MiB the bench moves,
	// so that a tcpdump starved of CPU on a loaded machine loses nothing.
	cap := exec.Command("ip", "netns", "exec", tp.router, "tcpdump", "-i", "r1", "-s", "0", "-B", "262144", "-U", "-w", pcap, "tcp port 4420")
	capErr := &stderrWatch{want: "listening on", seen: make(chan struct{})}
	cap.Stderr = capErr
	if err := cap.Start(); err != nil {
		t.Fatal(err)
	}
	// tcpdump says "listening on r1" once its capture (and filter) is in
	// place: the bench starts after that, not after a second that a
	// loaded machine may not give it.
	select {
	case <-capErr.seen:
	case <-time.After(hang):
		_ = cap.Process.Kill()
		_ = cap.Wait()
		t.Fatalf("tcpdump did not start capturing within %v: %s", hang, capErr.String())
	}
	tp.must("bench", "-a", tgtAddr, "-s", "4420", "-n", nqn, "-i", "1", "--rw", "randrw", "--bs", "64k", "--iodepth", "4",
		"--runtime", "1s", "--size", "8m", "--verify")
	time.Sleep(500 * time.Millisecond)
	_ = cap.Process.Signal(os.Interrupt)
	_ = cap.Wait()
	conns, err := pcapstream.ReadFile(pcap)
	if err != nil {
		t.Fatalf("%v (tcpdump: %s)", err, capErr.String())
	}
	const mss = 1448
	checked, largest, cut := 0, 0, 0
	for _, c := range conns {
		for _, s := range []*pcapstream.Stream{c.Initiator, c.Responder} {
			// A busy machine can make tcpdump drop packets: a stream is
			// checked up to its first gap (pcapstream cuts it there).
			if s.Gap > 0 {
				cut++
			}
			n, big, err := fpdus(s.Data)
			if err != nil {
				t.Fatalf("%v: %v", s, err)
			}
			checked += n
			largest = max(largest, big)
		}
	}
	if cut > 0 {
		t.Logf("tcpdump lost packets: %d of %d streams checked up to their first gap", cut, 2*len(conns))
	}
	if checked < 100 {
		t.Fatalf("only %d FPDUs captured (tcpdump: %s)", checked, capErr.String())
	}
	if largest > mss {
		t.Fatalf("an FPDU of %d bytes exceeds the MSS (%d)", largest, mss)
	}
	t.Logf("%d FPDUs in %d connections, the largest %d bytes (MSS %d)", checked, len(conns), largest, mss)
}

// hang is how long a test waits for a subprocess to do something it does at
// once (start capturing, exit after a signal): a hang guard, never a bound.
const hang = time.Minute

// stderrWatch keeps a subprocess's stderr and closes seen once want has
// appeared in it.
type stderrWatch struct {
	want string
	seen chan struct{}
	mu   sync.Mutex
	b    bytes.Buffer
	done bool
}

func (w *stderrWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if !w.done && strings.Contains(w.b.String(), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *stderrWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// fpdus walks one direction of an iWARP connection: the MPA frame, then
// FPDUs (length, ULPDU, pad, CRC). It returns their number and the largest
// size; a stream cut short by the end of the capture is fine.
func fpdus(b []byte) (n, largest int, err error) {
	if len(b) < wire.MPAHeaderLen {
		return 0, 0, nil
	}
	_, used, err := wire.ParseMPAFrame(b, 512)
	if err != nil {
		return 0, 0, fmt.Errorf("MPA frame: %w", err)
	}
	b = b[used:]
	for len(b) >= 2 {
		l := int(binary.BigEndian.Uint16(b))
		size := wire.FPDULen(l)
		if len(b) < size {
			break
		}
		n++
		largest = max(largest, size)
		b = b[size:]
	}
	return n, largest, nil
}

// TestRoutedPMTU: jumbo frame links, but the router forwards at most 1500
// bytes: the connections start with an MSS of 8948, path MTU discovery
// then shrinks their segments under FPDUs sized for that first MSS (which
// MPA allows: an FPDU may span segments).
func TestRoutedPMTU(t *testing.T) {
	tp := newTopo(t, 9000, 1500)
	tp.startTarget("256MiB")
	tp.cycle(16)
	// Path MTU discovery happened: the first side to send a large segment
	// (the target, with the Identify data) got the router's ICMP and keeps
	// a 1500-byte exception; later connections start with the small MSS.
	learned := 0
	for _, ns := range []struct{ name, dst string }{{tp.host, tgtAddr}, {tp.target, hostAddr}} {
		out := strings.TrimSpace(sh(t, "ip", "-n", ns.name, "route", "get", ns.dst))
		if strings.Contains(out, "mtu 1500") {
			learned++
		}
		t.Logf("%s: %s", ns.name, out)
	}
	if learned == 0 {
		t.Fatal("no path MTU exception on either side: the router never signalled the smaller MTU")
	}
}

// TestRoutedTBF: a 20 mbit/s token bucket on the router's links in both
// directions: large transfers take their time, keep alive still goes
// through (no reconnect), and the data is intact.
func TestRoutedTBF(t *testing.T) {
	tp := newTopo(t, 1500, 0)
	for _, dev := range []string{"r1", "r2"} {
		sh(t, "ip", "netns", "exec", tp.router, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "20mbit", "burst", "32kbit", "latency", "400ms")
	}
	tp.startTarget("256MiB")
	tp.cycle(24)
	// A bench through the connected controller's daemon at 20 mbit/s, with
	// keep alive every 2.5 s (KATO 5 s) sharing the link: no reconnect.
	tp.must("connect", "-a", tgtAddr, "-s", "4420", "-n", nqn)
	out := tp.must("bench", "-d", "nvme0", "--rw", "randrw", "--bs", "128k", "--iodepth", "16",
		"--runtime", "20s", "--size", "64m", "--verify", "-o", "json")
	var res struct {
		Errors       uint64 `json:"errors"`
		VerifyErrors uint64 `json:"verify_errors"`
		Verified     uint64 `json:"verified_blocks"`
		Total        struct {
			MiBps   float64 `json:"mib_per_s"`
			LatP99  float64 `json:"lat_p99_us"`
			LatMean float64 `json:"lat_mean_us"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Errors != 0 || res.VerifyErrors != 0 || res.Verified == 0 {
		t.Fatalf("bench: %+v", res)
	}
	t.Logf("bench through the token bucket: %.2f MiB/s, mean latency %.0f ms, p99 %.0f ms, %d blocks verified",
		res.Total.MiBps, res.Total.LatMean/1e3, res.Total.LatP99/1e3, res.Verified)
	if l := tp.list(); len(l) != 1 || l[0].Reconnects != 0 || l[0].State != "live" {
		t.Fatalf("after the bench: %+v (a keep-alive or I/O timeout made it reconnect)", l)
	}
	tp.must("disconnect", "-d", "nvme0")
	st := sh(t, "ip", "netns", "exec", tp.router, "tc", "-s", "qdisc", "show", "dev", "r2")
	t.Logf("router qdisc r2:\n%s", st)
}
