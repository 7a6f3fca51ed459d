package target

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestReopenNamespacesInPlace: ReopenNamespaces gives the namespaces of one
// ANA group new backends while they stay attached: the host's active
// namespace list never loses them (a Namespace Attribute Changed notice,
// not a removal), data written before is read back after, the new backend
// holds the file's claim, and a namespace of another group keeps its
// backend. Before, the gateway reopened a group by disabling its
// namespaces and enabling them again, which removed them from a host's
// view (a Linux host with one path then failed every I/O on its disk).
func TestReopenNamespacesInPlace(t *testing.T) {
	dir := t.TempDir()
	img1, img2 := filepath.Join(dir, "ns1.img"), filepath.Join(dir, "ns2.img")
	ns1, ns2 := fileNS(1, img1, "4MiB"), fileNS(2, img2, "4MiB")
	ns2.ANAGroup = 2
	cfg := testConfig(t, ns1, ns2)
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	data := pattern(4096, 7)
	for _, nsid := range []uint32{1, 2} {
		if err := do(t, h.io[0], rw(true, nsid, 0, data, 512)); err != nil {
			t.Fatal(err)
		}
	}
	backends := func() map[uint32]backend.Backend {
		s.regMu.RLock()
		defer s.regMu.RUnlock()
		m := map[uint32]backend.Backend{}
		for id, ns := range s.subsystems[testSubNQN].ns.Load().byID {
			m[id] = ns.be
		}
		return m
	}
	before := backends()
	aen := h.aer()
	if err := s.reopenGroup(2); err != nil {
		t.Fatalf("reopen group 2: %v", err)
	}
	waitAEN(t, aen, nvmeof.AENNSAttrChanged)
	if ids := h.changedNS(); !slices.Equal(ids, []uint32{2}) {
		t.Fatalf("changed namespaces %v, want [2]", ids)
	}
	if ids := h.activeNS(); !slices.Equal(ids, []uint32{1, 2}) {
		t.Fatalf("active namespaces after the reopen %v, want [1 2]", ids)
	}
	after := backends()
	if after[1] != before[1] {
		t.Error("namespace 1 (ANA group 1) got a new backend")
	}
	if after[2] == before[2] {
		t.Error("namespace 2 (ANA group 2) kept its backend")
	}
	got := make([]byte, 4096)
	if err := do(t, h.io[0], rw(false, 2, 0, got, 512)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the reopen: %v (equal %v)", err, bytes.Equal(got, data))
	}
	// The new backend took the file's claim once the old one closed.
	if b, err := backend.Open(backend.Config{Kind: "file", Path: img2}); !errors.Is(err, backend.ErrBusy) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("open of namespace 2's file by another opener: %v, want ErrBusy", err)
	}
	// A group with no namespace: nothing to do.
	if err := s.reopenGroup(9); err != nil {
		t.Fatalf("reopen of an empty group: %v", err)
	}
}
