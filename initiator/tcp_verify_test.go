package initiator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// The verified NVMe/TCP tests: the versioned-block workload of
// internal/testing/verify and its full sweep, over a target in this
// process (its file backend outlives a target's restart).

const tcpSubNQN = "nqn.2024-01.io.nvmetd.test:tcp"

const tcpHang = 60 * time.Second // the bound of every wait below

func tcpTargetConfig(t *testing.T, ports ...target.PortConfig) *target.Config {
	return &target.Config{
		Ports: ports,
		Subsystems: []target.SubsystemConfig{{NQN: tcpSubNQN, AllowAnyHost: true, Namespaces: []target.NamespaceConfig{{
			NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "ns1.img"), Size: "8MiB"},
		}}}},
		Tuning: target.TuningConfig{IOWorkers: 4, HealthInterval: time.Hour},
	}
}

func startTarget(t *testing.T, cfg *target.Config) *target.Target {
	t.Helper()
	tg, err := target.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tg
}

func stopTarget(t *testing.T, tg *target.Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tcpHang)
	defer cancel()
	if err := tg.Shutdown(ctx); err != nil {
		t.Errorf("target shutdown: %v", err)
	}
}

func hostConfig(addr string, trtype uint8) initiator.Config {
	return initiator.Config{
		Address: addr, SubNQN: tcpSubNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000074cf",
		HostID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, NrIOQueues: 2, QueueSize: 32,
		ReconnectDelay: 50 * time.Millisecond, TrType: trtype,
	}
}

// waitFor polls cond every 10 ms for up to tcpHang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(tcpHang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, tcpHang)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTCPTargetKillNoAcknowledgedWriteLost: the verified workload over
// NVMe/TCP while the target is shut down (its connections with it) and
// started again on the same port and file, twice: the host reconnects, no
// I/O fails, and the sweep finds every block at its acknowledged version
// or a later submitted one.
func TestTCPTargetKillNoAcknowledgedWriteLost(t *testing.T) {
	port := testnode.FreePort(t)
	cfg := tcpTargetConfig(t, target.PortConfig{ID: 1, Address: "127.0.0.1", ServiceID: port, Transport: target.TransportTCP, Subsystems: []string{tcpSubNQN}})
	tg := startTarget(t, cfg)
	defer func() { stopTarget(t, tg) }()
	ctx, cancel := context.WithTimeout(context.Background(), tcpHang)
	defer cancel()
	c, err := initiator.Connect(ctx, hostConfig(fmt.Sprintf("127.0.0.1:%d", port), nvmeof.TrTypeTCP))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	ns := c.Namespace(1)
	w, err := verify.Start(ns, verify.Config{Workers: 8, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for kill := range 2 {
		before := w.Stats().Writes
		waitFor(t, "writes before the kill", func() bool { return w.Stats().Writes >= before+200 })
		stopTarget(t, tg)
		tg = startTarget(t, cfg)
		waitFor(t, fmt.Sprintf("reconnect %d", kill+1), func() bool { return c.Reconnects() > kill && c.State() == initiator.StateLive })
	}
	before := w.Stats().Writes
	waitFor(t, "writes after the last reconnect", func() bool { return w.Stats().Writes >= before+200 })
	sctx, scancel := context.WithTimeout(context.Background(), tcpHang)
	defer scancel()
	r := w.Sweep(sctx, ns)
	t.Log(r)
	if err := r.Workload.Err(); err != nil {
		t.Error(err)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMultipathRDMAAndTCP: one subsystem through an NVMe/RDMA port and an
// NVMe/TCP port of one target is one head with two paths; the verified
// workload runs round-robin over both while the TCP port is removed and
// restored, then the RDMA port: I/O goes on through the other path each
// time, no I/O fails, and the sweep finds no lost acknowledged write.
func TestMultipathRDMAAndTCP(t *testing.T) {
	pr, pt := testnode.FreePort(t), testnode.FreePort(t)
	rdmaPort := target.PortConfig{ID: 1, Address: "127.0.0.1", ServiceID: pr, Subsystems: []string{tcpSubNQN}}
	tcpPort := target.PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: pt, Transport: target.TransportTCP, Subsystems: []string{tcpSubNQN}}
	cfg := tcpTargetConfig(t, rdmaPort, tcpPort)
	tg := startTarget(t, cfg)
	defer stopTarget(t, tg)
	s := initiator.NewSubsystem(tcpSubNQN, initiator.MultipathConfig{})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), tcpHang)
		defer cancel()
		_ = s.Close(ctx)
	}()
	ra, ta := fmt.Sprintf("127.0.0.1:%d", pr), fmt.Sprintf("127.0.0.1:%d", pt)
	for _, p := range []struct {
		addr   string
		trtype uint8
	}{{ra, nvmeof.TrTypeRDMA}, {ta, nvmeof.TrTypeTCP}} {
		ctx, cancel := context.WithTimeout(context.Background(), tcpHang)
		_, err := s.AddPath(ctx, hostConfig(p.addr, p.trtype))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	h := s.Namespace(1)
	if h == nil || len(s.Paths()) != 2 {
		t.Fatalf("paths %d, namespace %v", len(s.Paths()), h)
	}
	s.SetIOPolicy(initiator.IOPolicyRoundRobin)
	dev := verify.Head(h)
	w, err := verify.Start(dev, verify.Config{Workers: 8, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	reload := func(ports ...target.PortConfig) {
		t.Helper()
		cfg.Ports = ports
		if err := tg.Reload(cfg); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	// completions counts the workload's completions through addr so far.
	completions := func(addr string) int64 { return w.Completions(addr) }
	waitFor(t, "I/O on both paths", func() bool { return completions(ra) > 100 && completions(ta) > 100 })
	for _, step := range []struct {
		name  string
		keep  []target.PortConfig
		alive string
	}{
		{"TCP port removed", []target.PortConfig{rdmaPort}, ra},
		{"both ports", []target.PortConfig{rdmaPort, tcpPort}, ""},
		{"RDMA port removed", []target.PortConfig{tcpPort}, ta},
		{"both ports again", []target.PortConfig{rdmaPort, tcpPort}, ""},
	} {
		reload(step.keep...)
		if step.alive != "" {
			n := completions(step.alive)
			waitFor(t, step.name+": I/O on "+step.alive, func() bool { return completions(step.alive) > n+200 })
			continue
		}
		for _, p := range s.Paths() {
			waitFor(t, step.name+": "+p.Address()+" live", func() bool { return p.Controller().State() == initiator.StateLive })
		}
		nr, nt := completions(ra), completions(ta)
		waitFor(t, step.name+": I/O on both paths", func() bool { return completions(ra) > nr+100 && completions(ta) > nt+100 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), tcpHang)
	defer cancel()
	r := w.Sweep(ctx, dev)
	t.Log(r)
	if err := r.Workload.Err(); err != nil {
		t.Error(err)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Paths[ra] == 0 || r.Paths[ta] == 0 {
		t.Fatalf("completions per path %v", r.Paths)
	}
}
