//go:build rbd

package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// subsystemPaths is the address:port of each entry of l for gwSubNQN,
// sorted.
func subsystemPaths(l *nvmeof.DiscoveryLog) []string {
	var out []string
	for _, e := range l.Entries {
		if e.SubType == nvmeof.SubTypeNVMe && e.SubNQN == gwSubNQN {
			out = append(out, e.TrAddr+":"+e.TrSvcID)
		}
	}
	slices.Sort(out)
	return out
}

// TestGatewayProcessDiscovery: discovery across the group with two
// nvmetd-rbd processes. A host keeps a discovery controller on gw-a (as
// nvme discover --persistent, Discovery Log Change notices enabled); it
// lists gw-a's port only. gw-b starts: the host gets a Discovery Log
// Change notice and gw-a's log lists gw-b's port too (GENCTR moved), and
// gw-b's log lists both. gw-b stops cleanly: it withdraws its ports, the
// host gets a notice and gw-a's log lists gw-a's port only; it starts
// again and is listed again. (A gateway that dies keeps its entry:
// nothing but its clean stop removes it.)
func TestGatewayProcessDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	bin := buildGateway(t)
	var rb [4]byte
	rand.Read(rb[:])
	group := "d" + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	var procs [2]*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = &gwProc{t: t, name: name, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t), group: group}
		procs[i].writeConfig(c, image, group, 1+100*i)
	}
	a, b := procs[0], procs[1]
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				p.wait()
			}
			if t.Failed() && p.stderr != nil {
				t.Logf("%s log (end):\n%s", p.name, tail(p.stderr.String(), 6000))
			}
		}
	})
	pathA, pathB := "127.0.0.1:"+strconv.Itoa(a.port), "127.0.0.1:"+strconv.Itoa(b.port)

	a.start()
	// gw-a takes its group (the config object's watch must not make the
	// group's configuration agreement fail).
	a.waitLog(`group 1: set-ana optimized`, 0)
	from := a.waitLog(`recorded this gateway's ports for the group's discovery`, 0)

	events := make(chan initiator.Event, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 2*hang)
	defer cancel()
	dc, err := initiator.Connect(ctx, initiator.Config{Address: a.addr(), SubNQN: nvmeof.DiscoveryNQN, HostNQN: gwHostNQN,
		KeepAliveTimeout: 30 * time.Second, OnEvent: func(e initiator.Event) {
			if e.Kind == initiator.EventDiscoveryChanged {
				events <- e
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close(context.Background())
	read := func(what string) *nvmeof.DiscoveryLog {
		t.Helper()
		l, err := dc.DiscoveryLog(ctx)
		if err != nil {
			t.Fatalf("%s: gw-a's discovery log: %v", what, err)
		}
		return l
	}
	// Reads gw-a's log until it lists want (the notice may have come
	// from an earlier change of the same round).
	waitPaths := func(what string, want ...string) *nvmeof.DiscoveryLog {
		t.Helper()
		select {
		case <-events:
		case <-time.After(hang):
			t.Fatalf("%s: no Discovery Log Change notice from gw-a within %s", what, hang)
		}
		deadline := time.Now().Add(hang)
		for {
			l := read(what)
			if slices.Equal(subsystemPaths(l), want) {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: gw-a's discovery log lists %v, want %v", what, subsystemPaths(l), want)
			}
			select {
			case <-events:
			case <-time.After(time.Second):
			}
		}
	}
	l0 := read("gw-a alone")
	if got := subsystemPaths(l0); !slices.Equal(got, []string{pathA}) {
		t.Fatalf("gw-a alone lists %v, want %v", got, []string{pathA})
	}

	// gw-b joins.
	b.start()
	both := []string{pathA, pathB}
	slices.Sort(both)
	l1 := waitPaths("gw-b joined", both...)
	if l1.GenCtr == l0.GenCtr {
		t.Fatalf("GENCTR stayed %d", l1.GenCtr)
	}
	for _, e := range l1.Entries {
		if e.SubNQN == gwSubNQN && e.TrAddr+":"+e.TrSvcID == pathB && (e.PortID != 1 || e.TrType != nvmeof.TrTypeRDMA || e.AdrFam != nvmeof.AdrFamIPv4) {
			t.Errorf("gw-b's entry in gw-a's log: %+v", e)
		}
	}
	a.waitLog(`the discovery log lists the group's other ports.*gw-b`, from)
	if st := a.get("ctl.sock", "/v1/status"); !strings.Contains(st, `"gw-b 1 rdma `+pathB+` `+gwSubNQN+`"`) {
		t.Fatalf("gw-a's status does not show gw-b's port in discovery_ports:\n%s", st)
	}
	// gw-b's own log lists both (it read gw-a's ports when it started).
	deadline := time.Now().Add(hang)
	for {
		lb, err := initiator.Discover(ctx, initiator.Config{Address: b.addr(), HostNQN: gwHostNQN})
		if err != nil {
			t.Fatalf("discovery through gw-b: %v", err)
		}
		if slices.Equal(subsystemPaths(lb), both) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-b's discovery log lists %v, want %v", subsystemPaths(lb), both)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// gw-b stops cleanly: its ports are withdrawn.
	b.signal(syscall.SIGTERM)
	if st := b.wait(); st != 0 {
		t.Fatalf("gw-b exited %d", st)
	}
	if strings.Contains(b.stderr.String(), "(degraded)") {
		t.Fatalf("gw-b was degraded:\n%s", tail(b.stderr.String(), 4000))
	}
	waitPaths("gw-b stopped", pathA)

	// gw-b starts again: listed again.
	b.start()
	waitPaths("gw-b back", both...)
}
