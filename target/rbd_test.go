//go:build rbd

package target

import (
	"bytes"
	"sync"
	"testing"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// TestRBDNamespaceIO: a namespace on an RBD image of the test cluster
// (test/ceph/cluster.sh), served to a host: reads and writes take the
// backend's asynchronous path (librbd's aio, completed from its eventfd
// goroutine, no worker), many in flight on two I/O queues, and every block
// reads back what was written, through the target and through a second
// association.
func TestRBDNamespaceIO(t *testing.T) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	ns := NamespaceConfig{NSID: 1, Backend: BackendConfig{
		Kind: "rbd", Pool: c.Pool, Image: image, CephConf: c.Conf, ClientID: c.ClientID, Keyring: c.Keyring, BlockSize: 4096,
	}}
	s := startServer(t, testConfig(t, ns))
	sub := s.subsystems[testSubNQN]
	n, st := sub.ns.Load().lookup(1)
	if st != 0 || n == nil {
		t.Fatalf("namespace 1: status %v", st)
	}
	if n.async == nil {
		t.Fatalf("the rbd namespace has no asynchronous path (%T)", n.be)
	}
	n.put()

	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(2)
	const (
		bs      = 4096
		writers = 16
		ios     = 8 // per writer
		size    = 4 * bs
	)
	run := func(write bool) {
		var wg sync.WaitGroup
		errs := make(chan error, writers*ios)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q := h.io[w%len(h.io)]
				for i := range ios {
					k := w*ios + i
					lba := uint64(k * size / bs)
					want := pattern(size, k)
					data := want
					if !write {
						data = make([]byte, size)
					}
					if err := do(t, q, rw(write, 1, lba, data, bs)); err != nil {
						errs <- err
						return
					}
					if !write && !bytes.Equal(data, want) {
						t.Errorf("LBA %d: read back other data than written", lba)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("write %v: %v", write, err)
		}
	}
	run(true)
	run(false)

	// A second association reads the same.
	h2 := mustConnect(t, portAddr(s, 1), testSubNQN)
	h2.setup(1)
	got := make([]byte, size)
	if err := do(t, h2.io[0], rw(false, 1, uint64(5*size/bs), got, bs)); err != nil || !bytes.Equal(got, pattern(size, 5)) {
		t.Fatalf("second association: %v, data equal %v", err, bytes.Equal(got, pattern(size, 5)))
	}
	if r, w := n.readCmds.Load(), n.writeCmds.Load(); r < writers*ios || w != writers*ios {
		t.Errorf("namespace counters: %d reads, %d writes; want ≥ %d and %d", r, w, writers*ios, writers*ios)
	}
}
