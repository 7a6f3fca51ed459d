package initiator

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// nvmetdProc is an nvmetd process of the multipath test: its own
// configuration, port and CNTLID range, sharing the test's file backend.
type nvmetdProc struct {
	t    *testing.T
	bin  string
	dir  string
	cfg  string
	port int
	cmin uint16
	cmax uint16
	img  string
	p    *testnode.Process
}

// The shared namespace's NGUID: both processes give the same one, so the
// host sees one namespace (it would anyway: the target derives it from the
// NQN, NSID and backend path).
const mpNGUID = "6e766d65-7464-4d50-8000-000000000001"

// writeConfig writes the process's configuration with group 1 in state.
func (p *nvmetdProc) writeConfig(state string) {
	p.t.Helper()
	y := fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 5s, log_level: info}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s], ana_groups: [{id: 1, state: %s}]}
subsystems:
  - nqn: %s
    allow_any_host: true
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
      - {nsid: 1, nguid: %s, backend: {kind: file, path: %s, size: 64MiB, no_lock: true}}
`, filepath.Join(p.dir, "ctl.sock"), p.port, testSubNQN, state, testSubNQN, p.cmin, p.cmax, mpNGUID, p.img)
	if err := os.WriteFile(p.cfg, []byte(y), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// start runs the process and waits until its port accepts connections.
func (p *nvmetdProc) start() {
	p.t.Helper()
	p.p = testnode.Start(p.t, p.bin, testnode.Env(p.dir), p.addr(), "--config", p.cfg)
}

func (p *nvmetdProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// kill sends sig and waits for the process to end.
func (p *nvmetdProc) kill(sig syscall.Signal) {
	if p.p != nil {
		p.p.Stop(sig)
	}
}

// reload rewrites the configuration with group 1 in state and sends
// SIGHUP.
func (p *nvmetdProc) reload(state string) {
	p.t.Helper()
	p.writeConfig(state)
	if err := p.p.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
}

// TestMultipathTwoProcesses is the acceptance test of native multipath
// against real processes: two nvmetd processes serve one subsystem on one
// shared file (distinct CNTLID ranges, each with its own port); the host
// sees one namespace with two paths, and a verified write/read workload
// runs while (a) the process carrying the I/O is SIGKILLed, (b) it is
// restarted and its path reconnects (the I/O comes back to it, the first
// optimized path), (c) its ANA group is set inaccessible by reload, and
// back: no I/O error, no verification error. The failover times (last completion on the old path to the first
// on the new) are printed, not asserted.
func TestMultipathTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd processes: skipped in -short mode")
	}
	bin := testnode.BuildNvmetd(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "shared.img")
	procs := [2]*nvmetdProc{}
	for i := range procs {
		d := filepath.Join(dir, fmt.Sprint("p", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &nvmetdProc{t: t, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t),
			cmin: uint16(1 + 100*i), cmax: uint16(100 + 100*i), img: img}
		procs[i].writeConfig("optimized")
	}
	procs[0].start() // creates the file
	procs[1].start()
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill(syscall.SIGTERM)
			if t.Failed() {
				t.Logf("nvmetd %s log (end):\n%s", p.addr(), testnode.Tail(p.p.Stderr.String(), 4000))
			}
		}
	})
	s := newMultipath(t, MultipathConfig{}, procs[0].addr(), procs[1].addr())
	paths := s.Paths()
	pa, pb := paths[0], paths[1]
	if len(s.Namespaces()) != 1 {
		t.Fatalf("%d namespaces, want one through both paths", len(s.Namespaces()))
	}
	ca, cb := pa.Controller().CNTLID(), pb.Controller().CNTLID()
	if ca < 1 || ca > 100 || cb < 101 || cb > 200 {
		t.Fatalf("CNTLIDs %d and %d outside their processes' ranges", ca, cb)
	}
	t.Logf("one namespace, paths %s (cntlid %d) and %s (cntlid %d)", pa.Address(), ca, pb.Address(), cb)
	h := s.Namespace(1)
	w := startWorkload(h, 8, 256)
	stopped := false
	defer func() {
		if !stopped {
			w.finish()
		}
	}()
	w.waitOn(t, pa, time.Time{}, 100)

	// (a) SIGKILL the process carrying the I/O.
	at := time.Now()
	procs[0].kill(syscall.SIGKILL)
	w.waitOn(t, pb, at, 100)
	reportFailover(t, w, "on SIGKILL of nvmetd A", pa, at)

	// (b) restart it: its path reconnects, and the I/O comes back to it
	// (numa: the first optimized path).
	at = time.Now()
	procs[0].start()
	waitLive(t, pa)
	w.waitOn(t, pa, at, 100)

	// (c) A's group inaccessible by reload: I/O moves to B; and back.
	at = time.Now()
	procs[0].reload("inaccessible")
	w.waitOn(t, pb, at, 100)
	reportFailover(t, w, "on ANA inaccessible on nvmetd A (reload)", pa, at)
	procs[0].reload("optimized")
	waitLive(t, pa)

	// Both paths carry I/O again (round-robin).
	s.SetIOPolicy(IOPolicyRoundRobin)
	at = time.Now()
	w.waitOn(t, pa, at, 50)
	w.waitOn(t, pb, at, 50)
	w.finish()
	stopped = true
	w.check(t)
	t.Logf("%d verified I/Os, %d failovers, 0 errors", w.ops.Load(), h.Failovers())
}
