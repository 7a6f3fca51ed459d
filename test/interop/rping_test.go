package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The rping interop tests run cmd/iwping (our engine, on the host) against
// librdmacm's rping over the guest kernel's siw, both ways:
//
//	IwpingClientKernelServer: iwping -c on the host -> rping -s in the guest (forwarded port)
//	KernelClientIwpingServer: rping -c in the guest -> iwping -s on the host (10.0.2.2)
//
// Each run does rpingCount pings with -V (validate) and -v, and the test
// checks every ping line on both sides against rping's pattern, both exit
// codes, and that rping wrote nothing to stderr but its normal disconnect
// messages. iwping is built with -race when the test binary is. The client
// test turns on one siw debug message in the guest, to count the runs that
// met siw's accept race (see diagnoseClientStall).

const (
	rpingCount     = 20
	rpingGuestPort = 7999
	// rpingNoProgress is how long an iwping client may go without printing
	// a ping line before the run counts as stalled. A ping takes
	// milliseconds (about 1 s for 20 x 64 KiB under TCG), so this only
	// fires on a real hang.
	rpingNoProgress = 45 * time.Second
	// rpingStallProbe is when, without a ping line, the test first looks
	// at the guest's socket for unread bytes (the siw accept race, see
	// diagnoseClientStall); it looks again rpingStallConfirm later. The
	// engine's own nudges (iwarp.Config.Nudge: 100 ms, doubling, five
	// times) are over about 3.1 s after iwping's first FPDU.
	rpingStallProbe   = 6 * time.Second
	rpingStallConfirm = 2 * time.Second
)

var rpingSizes = []int{26, 64, 100, 1000, 4096, 16384, 65535}

// rpingCase is one iwping <-> rping run: the ping size and iwping's iWARP
// options.
type rpingCase struct {
	size  int
	flags []string
}

func (c rpingCase) name() string {
	n := fmt.Sprintf("size=%d", c.size)
	if len(c.flags) == 0 {
		return n + "/crc=off"
	}
	return n + "/" + strings.ReplaceAll(strings.TrimLeft(strings.Join(c.flags, "="), "-"), "=--", ",")
}

// rpingCases is the table: every size with CRC off and required, plus a
// few runs with the given extra options.
func rpingCases(extra ...rpingCase) []rpingCase {
	var cs []rpingCase
	for _, size := range rpingSizes {
		cs = append(cs, rpingCase{size: size}, rpingCase{size: size, flags: []string{"--crc", "required"}})
	}
	return append(cs, extra...)
}

// testIwpingClientKernelServer runs iwping -c on the host against the
// kernel's rping -s in the guest, through a forwarded port.
func testIwpingClientKernelServer(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	enableSiwRaceDebug(t, vm)
	bin := buildIwping(t)
	hostPort := vm.ForwardedPort(rpingGuestPort)
	cases := rpingCases(
		rpingCase{100, []string{"--p2p"}},
		rpingCase{65535, []string{"--p2p"}},
		rpingCase{4096, []string{"--fpdu", "1024"}},
		rpingCase{65535, []string{"--fpdu", "1024"}},
		rpingCase{16384, []string{"--p2p", "--crc", "required", "--fpdu", "1024"}},
	)
	start := time.Now()
	var raced []string
	for _, c := range cases {
		if !t.Run(c.name(), func(t *testing.T) {
			if runIwpingClient(t, vm, bin, hostPort, c) {
				raced = append(raced, c.name())
			}
		}) && restartIfOopsed(t, vm, c) {
			vm = lab.Start(t, k.opts(labOpts))
			enableSiwRaceDebug(t, vm)
			hostPort = vm.ForwardedPort(rpingGuestPort)
		}
	}
	t.Logf("%d runs in %.1fs; %d met the siw accept race: %s", len(cases), time.Since(start).Seconds(), len(raced), strings.Join(raced, " "))
}

// testKernelClientIwpingServer runs the kernel's rping -c in the guest
// against iwping -s on the host's 127.0.0.1 (10.0.2.2 in the guest).
func testKernelClientIwpingServer(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	bin := buildIwping(t)
	// --p2p is an initiator option and does not apply to iwping -s; siw's
	// initiator never asks for peer-to-peer mode.
	cases := rpingCases(
		rpingCase{1000, []string{"--crc", "offered"}},
		rpingCase{4096, []string{"--fpdu", "1024"}},
		rpingCase{65535, []string{"--fpdu", "1024"}},
		rpingCase{65535, []string{"--crc", "required", "--fpdu", "1024"}},
	)
	start := time.Now()
	for _, c := range cases {
		if !t.Run(c.name(), func(t *testing.T) { runIwpingServer(t, vm, bin, c) }) && restartIfOopsed(t, vm, c) {
			vm = lab.Start(t, k.opts(labOpts))
		}
	}
	t.Logf("%d runs in %.1fs", len(cases), time.Since(start).Seconds())
}

// testIwpingMPARev1KernelServer documents siw's behaviour with an MPA
// revision 1 request: there is no enhanced header to negotiate IRD/ORD,
// siw gives the connection ORD 0, and rping -s fails to post its RDMA Read
// ("post send error"). That is siw's choice, not a failure of ours (iwping
// against itself works with revision 1; see cmd/iwping); the test checks
// that it still fails that way, so that a change shows.
func testIwpingMPARev1KernelServer(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	bin := buildIwping(t)
	hostPort := vm.ForwardedPort(rpingGuestPort)
	r := startIwpingClient(t, vm, bin, hostPort, rpingCase{100, []string{"--mpa-rev", "1"}}, 3)
	if r.exitErr == nil {
		t.Errorf("iwping --mpa-rev 1 against rping -s succeeded; siw used to fail the RDMA Read with ORD 0 (update the test and docs)\n%s", r.describe())
		return
	}
	if !strings.Contains(r.srvErr, "post send error") {
		t.Fatalf("rping -s did not fail with \"post send error\" as expected for an MPA revision 1 connection\n%s", r.describe())
	}
	if r.srvExitErr == nil {
		t.Errorf("rping -s printed \"post send error\" but exited 0\n%s", r.describe())
	}
	t.Logf("as expected: rping -s: %q; iwping: %v", strings.TrimSpace(r.srvErr), r.exitErr)
}

// testIwcmP2PResetBeforeRTR documents a Linux bug (docs/linux-interop.md,
// problem 3): when an RFC 6581 peer-to-peer connection is reset after siw's
// MPA Reply and before the initiator's ready-to-receive message, iw_cm's
// cm_close_handler() finds the connection id still in IW_CM_STATE_CONN_RECV
// and hits BUG() (drivers/infiniband/core/iwcm.c:969 in 6.1, :964 in 6.12).
// Any remote peer can do that to a listening Linux siw; nvmetd's initiators
// ask for peer-to-peer mode only when told to. The test runs mpaprobe (MPA
// Request with P2P, read the Reply, RST) in the guest against rping -s and
// checks that the guest kernel still oopses that way, so that a fix shows. It
// runs last against each kernel: iw_cm is unusable after the oops, and the
// kernel's VM is stopped after the suite.
func testIwcmP2PResetBeforeRTR(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	bin := vm.BuildAndPut(t, "./test/interop/internal/mpaprobe")
	// rping -s is left to the VM's stop: after the oops it cannot destroy
	// its connection id.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const port = 7998
	srv := vm.Background(ctx, fmt.Sprintf("rping -s -a %s -p %d -C 1", vm.GuestAddr(), port))
	if err := srv.WaitListening(ctx, port); err != nil {
		t.Fatal(err)
	}
	out, err := vm.Exec(ctx, fmt.Sprintf("%s -dial %s:%d", bin, vm.GuestAddr(), port))
	if err != nil {
		t.Fatalf("mpaprobe: %v", err)
	}
	if !strings.Contains(out, "p2p true") || !strings.Contains(out, "connection reset before the RTR") {
		t.Fatalf("mpaprobe did not get a peer-to-peer MPA Reply and reset the connection:\n%s", out)
	}
	// The close event reaches iw_cm's work queue at once; allow for a
	// loaded machine.
	var oops string
	for deadline := time.Now().Add(time.Minute); oops == "" && time.Now().Before(deadline); {
		if oops = guestOops(vm); oops == "" {
			time.Sleep(500 * time.Millisecond)
		}
	}
	switch {
	case oops == "":
		t.Errorf("Linux %s: no oops within a minute of resetting a peer-to-peer connection before its RTR: "+
			"iw_cm no longer hits BUG() there; update docs/linux-interop.md (mpaprobe: %s)", vm.Release(), strings.TrimSpace(out))
	case !strings.Contains(oops, "kernel BUG at drivers/infiniband/core/iwcm.c:"):
		t.Errorf("Linux %s: an oops, but not iw_cm's BUG():\n%s", vm.Release(), oops)
	default:
		t.Logf("as expected, Linux %s oopses:\n%s", vm.Release(), strings.Join(strings.SplitAfterN(oops, "\n", 8)[:min(7, strings.Count(oops, "\n"))], ""))
		checkCrashReport(t, vm, "kernel BUG at drivers/infiniband/core/iwcm.c:")
	}
}

// checkCrashReport panics the guest, whose kernel has already oopsed with
// firstOops, and checks the harness's report of the dead VM: it must show
// that first oops with what came before it, and keep the whole console
// log, not only the panic that ends the console (session 8's CI lost the
// first oops of a guest panic that way). The VM is stopped after this
// test anyway.
func checkCrashReport(t *testing.T, vm *lab.VM, firstOops string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := vm.Exec(ctx, "sync; echo c > /proc/sysrq-trigger")
	if err == nil {
		t.Errorf("Linux %s: the guest did not panic on sysrq c", vm.Release())
		return
	}
	rep := err.Error()
	if !strings.Contains(rep, "the VM is not running") {
		t.Errorf("Linux %s: after sysrq c, not a dead VM's report: %v", vm.Release(), err)
		return
	}
	i, j := strings.Index(rep, "first kernel error on the console"), strings.Index(rep, firstOops)
	if i < 0 || j < i || !strings.Contains(rep, "sysrq triggered crash") {
		t.Errorf("Linux %s: the dead VM's report does not lead with the first oops (%q) and end with the panic:\n%s", vm.Release(), firstOops, rep)
	}
	if m := regexp.MustCompile(`whole console log kept in (\S+)`).FindStringSubmatch(rep); m == nil {
		t.Errorf("Linux %s: the report does not say where the console log was kept:\n%s", vm.Release(), rep)
	} else if b, err := os.ReadFile(m[1]); err != nil || !strings.Contains(string(b), firstOops) {
		t.Errorf("Linux %s: the kept console log %s: %v (has the first oops: %v)", vm.Release(), m[1], err, strings.Contains(string(b), firstOops))
	}
}

// siwRaceDebug is the guest's dynamic-debug switch for the one siw debug
// message that marks the accept race: siw_cm_llp_data_ready() logs
// "cep state: 7" (SIW_EPSTATE_RDMA_MODE) when an FPDU reaches the CM's
// data-ready callback, which only happens in the window described at
// diagnoseClientStall.
const siwRaceDebug = "func siw_cm_llp_data_ready"

// enableSiwRaceDebug turns that message on for the test (the VM is shared, so
// it is turned off again at the end).
func enableSiwRaceDebug(t *testing.T, vm *lab.VM) {
	ctl := "/sys/kernel/debug/dynamic_debug/control"
	if out := guestDiag(vm, fmt.Sprintf("echo '%s +p' > %s && echo ok", siwRaceDebug, ctl)); strings.TrimSpace(out) != "ok" {
		t.Logf("cannot count siw accept races (no siw dynamic debug in the guest): %s", out)
		return
	}
	t.Cleanup(func() { guestDiag(vm, fmt.Sprintf("echo '%s -p' > %s", siwRaceDebug, ctl)) })
}

// siwRaceHits counts the siw accept race messages in the guest's kernel log,
// or returns -1.
func siwRaceHits(vm *lab.VM) int {
	n, err := strconv.Atoi(strings.TrimSpace(guestDiag(vm, "dmesg | grep -c 'siw_cm_llp_data_ready: cep state: 7' || true")))
	if err != nil {
		return -1
	}
	return n
}

// guestOopsRe matches the first line of a guest kernel oops report.
var guestOopsRe = regexp.MustCompile(`(?m)^.*(kernel BUG at|Oops: |BUG: |general protection fault|Kernel panic).*$`)

// guestOops returns the guest kernel's first oops report (40 lines from its
// first line), or "".
func guestOops(vm *lab.VM) string {
	d := vm.Dmesg()
	loc := guestOopsRe.FindStringIndex(d)
	if loc == nil {
		return ""
	}
	lines := strings.SplitN(d[loc[0]:], "\n", 41)
	return strings.Join(lines[:min(len(lines), 40)], "\n")
}

// crashGuest panics the guest kernel (sysrq c). The VM runs with panic=-1
// and -no-reboot, so QEMU exits, and the next lab.Start boots a fresh VM.
func crashGuest(vm *lab.VM) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = vm.Exec(ctx, "sync; echo c > /proc/sysrq-trigger") // returns once the harness sees QEMU gone
}

// startHealthyVM is lab.Start, but if the shared VM's kernel has oopsed (in
// an earlier test; its RDMA stack is then unusable) it is crashed and a fresh
// VM is booted.
func startHealthyVM(t *testing.T, k kernel) *lab.VM {
	t.Helper()
	return startHealthy(t, k.opts(labOpts))
}

// startHealthy is startHealthyVM with other options.
func startHealthy(t *testing.T, opts lab.Options) *lab.VM {
	t.Helper()
	vm := lab.Start(t, opts)
	if oops := guestOops(vm); oops != "" {
		t.Logf("the lab VM's kernel oopsed before this test; restarting the VM. The oops:\n%s", oops)
		crashGuest(vm)
		vm = lab.Start(t, opts)
	}
	return vm
}

// restartIfOopsed is called after a run that did not pass: if the guest
// kernel has oopsed, it fails t with the oops and crashes the guest (so that
// the caller's next lab.Start, and later tests, get a fresh VM), and
// reports true.
func restartIfOopsed(t *testing.T, vm *lab.VM, c rpingCase) bool {
	t.Helper()
	oops := guestOops(vm)
	if oops == "" {
		return false
	}
	t.Errorf("the guest kernel oopsed during %s; its RDMA stack is unusable, so the VM is restarted for the remaining runs. The oops:\n%s", c.name(), oops)
	crashGuest(vm)
	return true
}

// clientRun is the outcome of one iwping -c run against rping -s.
type clientRun struct {
	out, stderr        string // iwping
	exitErr            error  // iwping's exit
	srvOut, srvErr     string // rping -s
	srvExitErr         error
	elapsed            time.Duration
	stalled            error  // why the run counts as stalled
	guestSocket, dmesg string // diagnostics, filled on failure
}

func (r *clientRun) describe() string {
	return fmt.Sprintf("iwping exit: %v\niwping stdout (%d bytes):\n%s\niwping stderr:\n%s\nrping -s exit: %v\nrping -s stdout (%d bytes):\n%s\nrping -s stderr:\n%s",
		r.exitErr, len(r.out), clipOutput(r.out), clipOutput(r.stderr), r.srvExitErr, len(r.srvOut), clipOutput(r.srvOut), r.srvErr)
}

// runIwpingClient runs and checks one iwping -c run against rping -s and
// reports whether it met siw's accept race.
func runIwpingClient(t *testing.T, vm *lab.VM, bin string, hostPort int, c rpingCase) (raced bool) {
	hits := siwRaceHits(vm)
	defer func() {
		if h := siwRaceHits(vm); hits >= 0 && h > hits {
			raced = true
			t.Logf("siw's accept race: %d FPDU(s) reached siw's CM data-ready callback after the MPA Reply (siw debug message); iwping's nudges had to make siw read them", h-hits)
		}
	}()
	r := startIwpingClient(t, vm, bin, hostPort, c, rpingCount)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		t.Logf("%s\nguest dmesg (tail):\n%s", r.describe(), lastLines(vm.Dmesg(), 40))
	}
	if r.exitErr != nil {
		fail("iwping -c: %v", r.exitErr)
		return
	}
	if err := checkRpingEnd(t, r.srvExitErr, r.srvErr); err != nil {
		fail("rping -s: %v", err)
		return
	}
	if err := checkPingLines(r.out, "ping data: ", c.size, rpingCount); err != nil {
		fail("iwping -c output: %v", err)
	}
	if err := checkPingLines(r.srvOut, "server ping data: ", c.size, rpingCount); err != nil {
		fail("rping -s output: %v", err)
	}
	t.Logf("%d x %d B verified both ways in %.2fs", rpingCount, c.size, r.elapsed.Seconds())
	return
}

// startIwpingClient starts rping -s in the guest, waits until it listens,
// runs iwping -c against it and collects both sides. A stall (no ping line
// for rpingNoProgress, or the siw accept race) is diagnosed and ends the test
// (see diagnoseClientStall).
func startIwpingClient(t *testing.T, vm *lab.VM, bin string, hostPort int, c rpingCase, count int) *clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srvCmd := fmt.Sprintf("rping -s -a %s -p %d -S %d -V -v", vm.GuestAddr(), rpingGuestPort, c.size)
	srv := vm.Background(ctx, keepStderr(srvCmd))
	defer srv.Kill()
	if err := srv.WaitListening(ctx, rpingGuestPort); err != nil {
		t.Fatalf("rping -s: %v", err)
	}
	args := append([]string{"-c", "-a", "127.0.0.1", "-p", strconv.Itoa(hostPort), "-C", strconv.Itoa(count), "-S", strconv.Itoa(c.size), "-v", "-V"}, c.flags...)
	cmd := exec.Command(bin, args...)
	out := &progressWriter{}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	t.Logf("guest: %s; host: iwping %s", srvCmd, strings.Join(args, " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r := &clientRun{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var firstRecvQ int
	probed := false
wait:
	for {
		select {
		case r.exitErr = <-done:
			break wait
		case <-tick.C:
		}
		idle := time.Since(out.lastLine(start))
		switch {
		case idle >= rpingNoProgress:
			r.stalled = fmt.Errorf("no ping line from iwping -c for %v", idle.Round(time.Second))
		case idle >= rpingStallProbe && !probed:
			probed = true
			firstRecvQ, _ = guestRecvQ(vm, rpingGuestPort)
			continue
		case probed && firstRecvQ > 0 && idle >= rpingStallProbe+rpingStallConfirm:
			// The same bytes are still unread in the guest kernel 2 s
			// later (siw reads in the socket's data-ready callback, at
			// once), and iwping waits for an answer: siw will never
			// read them (see diagnoseClientStall).
			if q, _ := guestRecvQ(vm, rpingGuestPort); q == firstRecvQ && out.lines() == 0 {
				r.stalled = fmt.Errorf("no ping line from iwping -c for %v, and %d bytes sit unread in the guest's socket", idle.Round(time.Second), q)
			} else {
				firstRecvQ = 0
			}
		}
		if r.stalled != nil {
			diagnoseClientStall(t, vm, cmd, done, srv, r, out, &stderr, hostPort, slices.Contains(c.flags, "--p2p"))
			return r
		}
	}
	r.elapsed = time.Since(start)
	r.out, r.stderr = out.String(), stderr.String()
	// rping -s ends when iwping disconnects.
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	select {
	case <-srv.Done():
	case <-wctx.Done():
		r.srvExitErr = fmt.Errorf("rping -s did not exit within 60 s of iwping's disconnect")
		srv.Kill()
	}
	sout, serr := srv.Wait()
	r.srvOut, r.srvErr = splitStderr(sout)
	if r.srvExitErr == nil {
		r.srvExitErr = serr
	}
	return r
}

// diagnoseClientStall handles an iwping -c run that stopped making progress.
// It records the guest's view of the connection, sends SIGQUIT to iwping for
// a goroutine dump, stops rping -s, and reports on t.
//
// The stall to expect is siw's accept race. siw_accept()
// (drivers/infiniband/sw/siw/siw_cm.c, in the lab's Debian 6.1 kernel and in
// upstream's) sends the MPA Reply before siw_qp_socket_assoc() installs the
// QP's socket callbacks, although its own comment says the callbacks must be
// in place first. An FPDU that arrives in that window is left in the socket
// by siw_cm_llp_data_ready() (the endpoint is already in RDMA mode), and
// nothing reads it until more bytes, or a FIN, arrive. iwping sends its first
// Send (the read advertisement; with --p2p, the RTR and then the Send) as
// soon as it has the Reply, and then waits for rping's answer. Before the
// engine's nudges (commit e0c1262: zero-length RDMA Writes after 100 ms of
// silence, doubling, five times) 5 to 9 of the 19 client runs here hung this
// way for good. Now the nudges make siw read; a stall with bytes still unread
// in the guest means they did not, and fails like any other stall. The
// guest's ss shows the unread bytes as the connection's Recv-Q, and siw's
// dynamic debug shows "siw_cm_llp_data_ready: cep state: 7" right after
// "send mpa reply".
func diagnoseClientStall(t *testing.T, vm *lab.VM, cmd *exec.Cmd, done <-chan error, srv *lab.Job, r *clientRun, out *progressWriter, stderr *bytes.Buffer, hostPort int, p2p bool) {
	t.Helper()
	recvQ, sock := guestRecvQ(vm, rpingGuestPort)
	r.guestSocket = sock
	qp := guestDiag(vm, "rdma res show qp; rdma res show cm_id")
	hostSock, _ := exec.Command("ss", "-tnoi", fmt.Sprintf("( dport = :%d )", hostPort)).CombinedOutput()
	race := recvQ > 0 && out.lines() == 0
	exited := false
	waitIwping := func(d time.Duration) bool {
		if !exited {
			select {
			case r.exitErr = <-done:
				exited = true
			case <-time.After(d):
			}
		}
		return exited
	}
	quitIwping := func() {
		if waitIwping(500 * time.Millisecond) {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGQUIT) // the Go runtime prints every goroutine's stack and exits 2
		if !waitIwping(15 * time.Second) {
			_ = cmd.Process.Kill()
			waitIwping(time.Minute)
		}
	}
	stopRping := func() {
		srv.Kill()
		sout, serr := srv.Wait()
		r.srvOut, r.srvErr = splitStderr(sout)
		r.srvExitErr = serr
	}
	if race && p2p {
		// In peer-to-peer mode siw reports the connection established
		// only when it reads the RTR, which here it has not: the kernel's
		// iw_cm id is still in CONN_RECV. If the TCP connection then
		// closes before rping destroys its id, iw_cm's cm_close_handler()
		// hits BUG() (drivers/infiniband/core/iwcm.c:969 in 6.1; seen in
		// a CI run, and reproduced at will by sending an MPA request with
		// P2P and a TCP RST instead of the RTR). So rping goes first here;
		// iwping then sees the disconnect, or gets SIGQUIT.
		stopRping()
		quitIwping()
	} else {
		quitIwping()
		stopRping()
	}
	r.out, r.stderr = out.String(), stderr.String()
	r.dmesg = vm.Dmesg()
	report := fmt.Sprintf("%v\n\nguest socket of rping -s (ss -tnoi):\n%s\nguest rdma res:\n%s\nhost socket of iwping (ss -tnoi):\n%s\n"+
		"iwping: %v; stdout %d bytes; %s\n"+
		"rping -s exit: %v\nrping -s stdout (%d bytes):\n%s\nrping -s stderr:\n%s",
		r.stalled, sock, qp, hostSock, r.exitErr, len(r.out), iwpingState(r.stderr), r.srvExitErr, len(r.srvOut), clipOutput(r.srvOut), r.srvErr)
	// iwping waited for rping's first answer: its goroutine dump shows it
	// in PollWait, or (rping stopped first) it failed waiting for it.
	waiting := strings.Contains(r.stderr, "PollWait") || strings.Contains(r.stderr, "wait for RDMA_WRITE_ADV: disconnected")
	if race && waiting {
		report += fmt.Sprintf("\n\nThis is siw's accept race (see diagnoseClientStall): iwping's first FPDU(s) arrived while siw_accept() was between sending the MPA Reply "+
			"and installing the QP's socket callbacks, and siw never read them (%d bytes unread in the guest's socket, rping still waiting, iwping waiting for its answer). "+
			"The engine's nudges should have made siw read them.", recvQ)
	}
	t.Fatalf("iwping -c against rping -s stalled: %s\niwping stdout:\n%s\niwping stderr (goroutine dump):\n%s\nguest dmesg (tail):\n%s",
		report, clipOutput(r.out), r.stderr, lastLines(r.dmesg, 60))
}

// iwpingState describes iwping's stderr: the goroutines of a SIGQUIT dump,
// or the stderr itself.
func iwpingState(stderr string) string {
	if strings.Contains(stderr, "goroutine ") {
		return "goroutines after SIGQUIT (frames of this module):\n" + goroutineSummary(stderr)
	}
	return "stderr:\n" + clipOutput(stderr)
}

// goroutineSummary shortens a Go goroutine dump to each goroutine's header
// and its frames in this module (package main included), with file:line.
func goroutineSummary(dump string) string {
	var b strings.Builder
	for _, blk := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(blk), "\n")
		if !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		var frames []string
		for i, l := range lines[1:] {
			if !strings.HasPrefix(l, "github.com/nvmetd/nvmetd/") && !strings.HasPrefix(l, "main.") {
				continue
			}
			if j := strings.LastIndex(l, "("); j > 0 {
				l = l[:j]
			}
			if i+2 < len(lines) {
				if f := strings.Fields(lines[i+2]); len(f) > 0 {
					l += " " + filepath.Base(f[0])
				}
			}
			frames = append(frames, "\t"+l)
		}
		if len(frames) > 0 {
			b.WriteString(lines[0] + "\n" + strings.Join(frames, "\n") + "\n")
		}
	}
	if b.Len() == 0 {
		return "(no goroutine of this module in the dump)"
	}
	return b.String()
}

// guestRecvQ returns the Recv-Q of the guest's established TCP connection on
// local port port (and ss's description of it), or -1.
func guestRecvQ(vm *lab.VM, port int) (int, string) {
	s := guestDiag(vm, fmt.Sprintf("ss -Htnoi state established '( sport = :%d )'", port))
	f := strings.Fields(s)
	if len(f) < 1 {
		return -1, s
	}
	q, err := strconv.Atoi(f[0])
	if err != nil {
		return -1, s
	}
	return q, s
}

func guestDiag(vm *lab.VM, cmd string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := vm.Exec(ctx, cmd)
	if err != nil {
		return fmt.Sprintf("%s(%v)", out, err)
	}
	return out
}

func runIwpingServer(t *testing.T, vm *lab.VM, bin string, c rpingCase) {
	port := freeLocalPort(t)
	args := append([]string{"-s", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-S", strconv.Itoa(c.size), "-v"}, c.flags...)
	cmd := exec.Command(bin, args...)
	var out, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var srvErr error
	exited := false
	waitServer := func(limit time.Duration) bool {
		if exited {
			return true
		}
		timeout := time.After(limit)
		if limit <= 0 {
			c := make(chan time.Time)
			close(c)
			timeout = c
		}
		select {
		case srvErr = <-done:
			exited = true
		default:
			select {
			case srvErr = <-done:
				exited = true
			case <-timeout:
			}
		}
		return exited
	}
	// quit takes a goroutine dump of a server that should have ended.
	quit := func(why string) {
		if waitServer(0) {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		if !waitServer(15 * time.Second) {
			_ = cmd.Process.Kill()
			waitServer(time.Minute)
		}
		srvErr = fmt.Errorf("%s; SIGQUIT sent (goroutine dump on its stderr): %v", why, srvErr)
	}
	defer quit("iwping -s still running at the end of the test")
	if err := waitHostListening(port, done, 20*time.Second); err != nil {
		t.Fatalf("iwping %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	cliCmd := fmt.Sprintf("rping -c -a %s -p %d -C %d -S %d -vV", vm.HostAddr(), port, rpingCount, c.size)
	t.Logf("host: iwping %s; guest: %s", strings.Join(args, " "), cliCmd)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	cli := vm.Background(ctx, keepStderr(cliCmd))
	var hung string
	select {
	case <-cli.Done():
	case <-time.After(rpingNoProgress + 45*time.Second):
		// rping -c has hung: the guest's view and a goroutine dump of the
		// server before the connection goes away.
		hung = guestDiag(vm, fmt.Sprintf("ss -tnoi '( dport = :%d )'; rdma res show qp; rdma res show cm_id", port))
		quit("rping -c hung")
		cli.Kill()
	}
	cliOut, cliErr := cli.Wait()
	elapsed := time.Since(start)
	cliOut, cliStderr := splitStderr(cliOut)
	if !waitServer(30 * time.Second) {
		quit("iwping -s did not exit within 30 s of the end of rping -c")
	}
	describe := func() string {
		return fmt.Sprintf("rping -c exit: %v\nrping -c stdout (%d bytes):\n%s\nrping -c stderr:\n%s\niwping -s exit: %v\niwping -s stdout (%d bytes):\n%s\niwping -s stderr:\n%s\nguest dmesg (tail):\n%s",
			cliErr, len(cliOut), clipOutput(cliOut), cliStderr, srvErr, len(out.String()), clipOutput(out.String()), clipOutput(stderr.String()), lastLines(vm.Dmesg(), 40))
	}
	if hung != "" {
		t.Fatalf("rping -c against iwping -s hung for %v\nguest:\n%s\n%s", elapsed.Round(time.Second), hung, describe())
	}
	if err := checkRpingEnd(t, cliErr, cliStderr); err != nil {
		t.Fatalf("rping -c: %v\n%s", err, describe())
	}
	if srvErr != nil {
		t.Fatalf("iwping -s: %v\n%s", srvErr, describe())
	}
	if err := checkPingLines(cliOut, "ping data: ", c.size, rpingCount); err != nil {
		t.Errorf("rping -c output: %v\n%s", err, describe())
	}
	if err := checkPingLines(out.String(), "server ping data: ", c.size, rpingCount); err != nil {
		t.Errorf("iwping -s output: %v\n%s", err, describe())
	}
	if s := stderr.String(); s != "" {
		t.Logf("iwping -s stderr:\n%s", clipOutput(s))
	}
	t.Logf("%d x %d B verified both ways in %.2fs", rpingCount, c.size, elapsed.Seconds())
}

// pingText is the text of ping number ping of the given size, as rping's
// client fills its buffer: "rdma-ping-N: " and then letters from 'A'+N
// (modulo the 58 characters 'A'..'z'), wrapping from 'z' to 'A', up to the
// NUL in the last byte.
func pingText(ping, size int) string {
	b := make([]byte, size-1)
	cc := copy(b, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := byte('A' + ping%58)
	for i := cc; i < len(b); i++ {
		b[i] = c
		if c++; c > 'z' {
			c = 'A'
		}
	}
	return string(b)
}

// checkPingLines checks that out holds exactly count lines prefix+ping text,
// in order.
func checkPingLines(out, prefix string, size, count int) error {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			got = append(got, l)
		}
	}
	if len(got) != count {
		return fmt.Errorf("%d lines %q, want %d", len(got), prefix+"...", count)
	}
	for i, l := range got {
		if want := prefix + pingText(i, size); l != want {
			return fmt.Errorf("ping %d: got %q (%d bytes), want %q (%d bytes)", i, clipOutput(l), len(l), clipOutput(want), len(want))
		}
	}
	return nil
}

// stderrMark starts the lines of a guest command's stderr that keepStderr
// appends to its stdout.
const stderrMark = "stderr| "

// keepStderr makes the guest command cmd append its stderr, each line marked
// with stderrMark, to its stdout when it ends, keeping its exit status: the
// harness returns stderr only for a failed command, and rping's stderr
// matters when it succeeds too. (Merging the two streams instead would cut
// rping's block-buffered stdout lines.)
func keepStderr(cmd string) string {
	return fmt.Sprintf("%s 2>/tmp/stderr.$$; rc=$?; sed 's/^/%s/' /tmp/stderr.$$; rm -f /tmp/stderr.$$; exit $rc", cmd, stderrMark)
}

// splitStderr separates the lines keepStderr appended from the command's
// stdout.
func splitStderr(out string) (stdout, stderr string) {
	var o, e strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if rest, ok := strings.CutPrefix(l, stderrMark); ok {
			e.WriteString(rest)
		} else {
			o.WriteString(l)
		}
	}
	return o.String(), e.String()
}

// rpingNormalStderr matches what rping writes to stderr on a normal end: the
// disconnect event, and the server's wait that the disconnect ends (state 10
// is DISCONNECTED).
var rpingNormalStderr = regexp.MustCompile(`^((server|client) DISCONNECT EVENT\.\.\.|wait for RDMA_READ_ADV state 10)$`)

// rpingTeardownRaceLine is what rping's teardown race prints last.
const rpingTeardownRaceLine = "rdma_get_cm_event: Bad file descriptor"

// checkRpingEnd checks how rping ended: its exit (err, nil for status 0) and
// its stderr. A normal end is status 0 and only rping's normal stderr lines.
// rping has its own teardown race: after a normal end, main destroys the CM
// event channel while rping's cm_thread, woken by a late CM event, loops back
// into rdma_get_cm_event on the closed descriptor, prints
// rpingTeardownRaceLine and calls exit(-1) from that thread. Whichever of
// that exit and main's return reaches exit_group first sets the status: 255,
// or 0 with the line already printed. Either is taken for the race only with
// stderr that is rping's normal end plus that one last line; the caller still
// checks every ping. The peer plays no part in it (the connection is over),
// so it is logged, not failed.
func checkRpingEnd(t *testing.T, err error, stderr string) error {
	t.Helper()
	if err != nil {
		var ee *lab.ExecError
		if !errors.As(err, &ee) || ee.Err != nil || ee.ExitCode != 255 {
			return err
		}
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if lines[len(lines)-1] != rpingTeardownRaceLine {
		if err != nil {
			return fmt.Errorf("%w without rping's teardown race on stderr", err)
		}
		return checkRpingStderr(stderr)
	}
	if len(lines) < 2 {
		return fmt.Errorf("exit %v; stderr only %q, without rping's normal end", err, rpingTeardownRaceLine)
	}
	if e := checkRpingStderr(strings.Join(lines[:len(lines)-1], "\n")); e != nil {
		return fmt.Errorf("exit %v; %w", err, e)
	}
	status := 0
	if err != nil {
		status = 255
	}
	t.Logf("rping exited %d after a normal end, with %q last on stderr: its own teardown race (cm_thread read the CM event channel main had just destroyed); the pings are checked as usual", status, rpingTeardownRaceLine)
	return nil
}

func checkRpingStderr(s string) error {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" && !rpingNormalStderr.MatchString(l) {
			return fmt.Errorf("error on stderr: %q (all of stderr: %q)", l, s)
		}
	}
	return nil
}

// buildIwping builds cmd/iwping for the host (once per test binary, see
// hostBuild), with -race if this test binary has the race detector.
func buildIwping(t *testing.T) string {
	t.Helper()
	return hostBuild(t, "github.com/nvmetd/nvmetd/cmd/iwping", raceEnabled())
}

// hostBuilds holds the host binaries that hostBuild made, by package; the
// kernels of the suite share them.
var hostBuilds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// hostBuild builds the main package pkg for the host, with -race if race,
// into a directory that lives as long as the test binary (TestMain removes
// it), and returns the binary's path. Each package is built once.
func hostBuild(t *testing.T, pkg string, race bool) string {
	t.Helper()
	hostBuilds.Lock()
	defer hostBuilds.Unlock()
	if b, ok := hostBuilds.bins[pkg]; ok {
		return b
	}
	if hostBuilds.dir == "" {
		d, err := os.MkdirTemp("", "nvmetd-interop-bin-")
		if err != nil {
			t.Fatal(err)
		}
		hostBuilds.dir, hostBuilds.bins = d, map[string]string{}
	}
	out := filepath.Join(hostBuilds.dir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	start := time.Now()
	if b, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	t.Logf("built %s (race detector: %v) in %.1fs", pkg, race, time.Since(start).Seconds())
	hostBuilds.bins[pkg] = out
	return out
}

// removeHostBuilds removes what hostBuild made.
func removeHostBuilds() {
	hostBuilds.Lock()
	defer hostBuilds.Unlock()
	if hostBuilds.dir != "" {
		_ = os.RemoveAll(hostBuilds.dir)
	}
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// freeLocalPort returns a TCP port that is free on 127.0.0.1 at the moment.
func freeLocalPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitHostListening waits until a TCP socket listens on 127.0.0.1:port (from
// /proc/net/tcp, without connecting to it), or the server exits.
func waitHostListening(port int, exited <-chan error, limit time.Duration) error {
	want := fmt.Sprintf("0100007F:%04X", port)
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile("/proc/net/tcp"); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
					return nil
				}
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before listening on port %d: %v", port, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on 127.0.0.1:%d after %v", port, limit)
		}
	}
}

// progressWriter collects a command's output and notes when it last
// completed a line.
type progressWriter struct {
	mu    sync.Mutex
	b     bytes.Buffer
	n     int
	lastT time.Time
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k := bytes.Count(p, []byte{'\n'}); k > 0 {
		w.n += k
		w.lastT = time.Now()
	}
	return w.b.Write(p)
}

// lastLine returns when the last line was completed, or start.
func (w *progressWriter) lastLine(start time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastT.IsZero() {
		return start
	}
	return w.lastT
}

func (w *progressWriter) lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *progressWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

type lockedBuffer = testnode.SyncBuffer

// clipOutput shortens long output (64 KiB ping lines) for the log: each line to
// 200 bytes, and the whole to its last 100 lines.
func clipOutput(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 100 {
		lines = append([]string{fmt.Sprintf("[... %d lines ...]", len(lines)-100)}, lines[len(lines)-100:]...)
	}
	for i, l := range lines {
		if len(l) > 200 {
			lines[i] = fmt.Sprintf("%s[... %d bytes]", l[:200], len(l))
		}
	}
	return strings.Join(lines, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
