//go:build rbd

package backend_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/backend/backendtest"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// aioWaiter receives one completion (backend.Completion); a channel, so
// that it converts to the interface without allocating.
type aioWaiter chan error

func (w aioWaiter) IODone(err error) { w <- err }

var aioWaiters = sync.Pool{New: func() any { return make(aioWaiter, 1) }}

// rbdAsync is an RBD whose ReadAt and WriteAt go through the asynchronous
// path (StartReadAt/StartWriteAt and a wait for the completion), as the
// target uses it, so that the conformance suite runs through it. A start
// refused (every slot taken) falls back to the synchronous call, as the
// target does.
type rbdAsync struct{ *backend.RBD }

func (a rbdAsync) ReadAt(p []byte, off int64) error {
	w := aioWaiters.Get().(aioWaiter)
	defer aioWaiters.Put(w)
	if !a.StartReadAt(p, off, w) {
		return a.RBD.ReadAt(p, off)
	}
	return <-w
}

func (a rbdAsync) WriteAt(p []byte, off int64, fua bool) error {
	w := aioWaiters.Get().(aioWaiter)
	defer aioWaiters.Put(w)
	if !a.StartWriteAt(p, off, fua, w) {
		return a.RBD.WriteAt(p, off, fua)
	}
	return <-w
}

// TestConformanceRBDAsync runs the conformance tests through the
// asynchronous path (rbd_aio_read/rbd_aio_write, completions on an
// eventfd).
func TestConformanceRBDAsync(t *testing.T) {
	for _, bs := range []uint32{512, 4096} {
		t.Run(sizeName(bs), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				r, _, _ := openRBD(t, 16<<20, bs)
				return rbdAsync{r}
			}, backendtest.Options{})
		})
	}
	backendtest.RunReadOnly(t, func(t *testing.T) backend.Backend {
		c := cephtest.Shared(t)
		image := c.CreateImage(t, 8<<20)
		o := rbdOptions(c, image, 0)
		o.ReadOnly = true
		r, err := backend.OpenRBD(o)
		if err != nil {
			t.Fatal(err)
		}
		return rbdAsync{r}
	})
}

// TestRBDAsyncNoAllocs: starting and completing an asynchronous read or
// write allocates nothing on the Go side (the buffer pin, the slot, the
// eventfd read and the completion are all reused).
func TestRBDAsyncNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race (make alloc and make test-rbd do)")
	}
	r, _, _ := openRBD(t, 16<<20, 512)
	defer r.Close()
	buf := pageBuffer(t, 128<<10)
	w := make(aioWaiter, 1)
	for _, n := range []int{4096, 128 << 10} {
		p := buf[:n]
		for name, fn := range map[string]func() bool{
			"StartReadAt":  func() bool { return r.StartReadAt(p, 1<<20, w) },
			"StartWriteAt": func() bool { return r.StartWriteAt(p, 1<<20, false, w) },
		} {
			var err error
			run := func() {
				if !fn() {
					err = errors.New("start refused")
					return
				}
				if e := <-w; e != nil {
					err = e
				}
			}
			run() // warm up
			allocs := testing.AllocsPerRun(200, run)
			if err != nil {
				t.Fatalf("%s %d bytes: %v", name, n, err)
			}
			if allocs != 0 {
				t.Errorf("%s of %d bytes: %v allocations per operation, want 0", name, n, allocs)
			}
		}
	}
}

// TestRBDAsyncInFlight: many operations in flight on one image (more than
// the cap): each is either started and completed once with the right data,
// or refused, never lost.
func TestRBDAsyncInFlight(t *testing.T) {
	r, _, _ := openRBD(t, 16<<20, 4096)
	defer r.Close()
	const n = 3 * backend.RBDMaxAIO
	bufs := make([][]byte, n)
	ws := make([]aioWaiter, n)
	started := 0
	for i := range n {
		bufs[i] = pageBuffer(t, 4096)
		copy(bufs[i], []byte{byte(i), byte(i >> 8), 0xAA})
		ws[i] = make(aioWaiter, 2)
		if r.StartWriteAt(bufs[i], int64(i)*4096, false, ws[i]) {
			started++
		} else if err := r.WriteAt(bufs[i], int64(i)*4096, false); err != nil {
			t.Fatal(err)
		} else {
			ws[i] <- nil
		}
	}
	t.Logf("%d of %d writes started asynchronously (cap %d)", started, n, backend.RBDMaxAIO)
	for i := range n {
		if err := <-ws[i]; err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if len(ws[i]) != 0 {
			t.Fatalf("write %d completed twice", i)
		}
	}
	got := pageBuffer(t, 4096)
	for i := range n {
		if !r.StartReadAt(got, int64(i)*4096, ws[i]) {
			t.Fatal("a read refused with nothing in flight")
		}
		if err := <-ws[i]; err != nil || !bytes.Equal(got, bufs[i]) {
			t.Fatalf("read %d: %v, data equal %v", i, err, bytes.Equal(got, bufs[i]))
		}
	}
}

// TestRBDAsyncClusterPaused: the cluster frozen (SIGSTOP): asynchronous
// operations in flight fill the cap, the next start is refused (it would
// wait in the target's queue), and every one completes with
// ErrUnavailable after the op timeout; once the cluster runs again the
// same backend serves asynchronous I/O with the data from before intact.
func TestRBDAsyncClusterPaused(t *testing.T) {
	c, r := openPrivateRBD(t)
	defer r.Close()
	before := pageBuffer(t, 64<<10)
	copy(before, "written before the outage")
	w := make(aioWaiter, 1)
	if !r.StartWriteAt(before, 0, false, w) {
		t.Fatal("start refused")
	}
	if err := <-w; err != nil {
		t.Fatal(err)
	}
	frozen := false
	resume := func() {
		if frozen {
			for _, d := range c.Daemons {
				c.Signal(t, d, syscall.SIGCONT)
			}
			frozen = false
		}
	}
	defer resume()
	for _, d := range c.Daemons {
		c.Signal(t, d, syscall.SIGSTOP)
	}
	frozen = true

	all := make(aioWaiter, backend.RBDMaxAIO)
	bufs := make([][]byte, backend.RBDMaxAIO)
	begin := time.Now()
	for i := range backend.RBDMaxAIO {
		bufs[i] = pageBuffer(t, 4096)
		var ok bool
		if i%2 == 0 {
			ok = r.StartWriteAt(bufs[i], 1<<20+int64(i)*4096, false, all)
		} else {
			ok = r.StartReadAt(bufs[i], int64(i)*4096, all)
		}
		if !ok {
			t.Fatalf("start %d of %d refused", i, backend.RBDMaxAIO)
		}
	}
	extra := pageBuffer(t, 4096)
	if r.StartWriteAt(extra, 0, false, make(aioWaiter, 1)) {
		t.Fatalf("start %d accepted: more than the cap in flight", backend.RBDMaxAIO+1)
	}
	for i := range backend.RBDMaxAIO {
		select {
		case err := <-all:
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("operation in flight on a frozen cluster: %v, want ErrUnavailable", err)
			}
		case <-time.After(2 * time.Minute): // a hang guard, not a timing assertion
			t.Fatalf("%d of %d operations unanswered 2 minutes after the cluster froze", backend.RBDMaxAIO-i, backend.RBDMaxAIO)
		}
	}
	t.Logf("%d operations in flight on a frozen cluster: all ErrUnavailable after %s (op timeout %s)",
		backend.RBDMaxAIO, time.Since(begin).Round(time.Millisecond), opTimeout)

	resume()
	// The client reconnects by itself; the first operations may still
	// time out. Bounded: 40 attempts of at most the op timeout each.
	p := pageBuffer(t, 4096)
	var werr error
	for range 40 {
		if !r.StartWriteAt(p, 1<<20, false, w) {
			t.Fatal("start refused with nothing in flight")
		}
		if werr = <-w; !errors.Is(werr, backend.ErrUnavailable) {
			break
		}
	}
	if werr != nil {
		t.Fatalf("write after the cluster resumed: %v", werr)
	}
	got := pageBuffer(t, 64<<10)
	if !r.StartReadAt(got, 0, w) {
		t.Fatal("start refused")
	}
	if err := <-w; err != nil || !bytes.Equal(got, before) {
		t.Fatalf("read after the cluster resumed: %v; data intact %v", err, bytes.Equal(got, before))
	}
}

// TestRBDAsyncClusterStopped: asynchronous writers in flight while the
// cluster goes away: every operation completes with ErrUnavailable, and
// Close, called with operations still in flight, returns (bounded by the
// op timeout) and completes them all. A private cluster, stopped by the
// test.
func TestRBDAsyncClusterStopped(t *testing.T) {
	c, r := openPrivateRBD(t)
	p := pageBuffer(t, 64<<10)
	w := make(aioWaiter, 1)
	for off := int64(0); off < 8<<20; off += 1 << 20 {
		if !r.StartWriteAt(p, off, false, w) {
			t.Fatal("start refused")
		}
		if err := <-w; err != nil {
			t.Fatal(err)
		}
	}
	// Writers, each with one asynchronous write in flight at a time, until
	// one fails.
	const writers = 16
	writerErrs := make(chan error, writers)
	for i := range writers {
		go func() {
			buf := pageBuffer(t, 4096)
			w := make(aioWaiter, 1)
			for j := int64(0); ; j++ {
				if !r.StartWriteAt(buf, (int64(i)<<19+j*4096)%(8<<20), false, w) {
					writerErrs <- errors.New("start refused")
					return
				}
				if err := <-w; err != nil {
					writerErrs <- err
					return
				}
			}
		}()
	}
	stopping := time.Now()
	c.Stop(t)
	const hang = 2 * time.Minute // hang guards only: times are logged, not asserted
	for range writers {
		select {
		case err := <-writerErrs:
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("writer in flight: %v, want ErrUnavailable", err)
			}
		case <-time.After(hang):
			t.Fatalf("writers in flight: no answer %s after the cluster stopped", hang)
		}
	}
	t.Logf("%d asynchronous writers: all failed with ErrUnavailable %s after the stop began", writers, time.Since(stopping).Round(time.Millisecond))

	// Operations in flight when Close is called: each is completed (with
	// ErrUnavailable), and Close returns.
	inflight := make(aioWaiter, 8)
	for i := range 8 {
		if !r.StartWriteAt(pageBuffer(t, 4096), int64(i)<<20, false, inflight) {
			t.Fatal("start refused")
		}
	}
	closed := make(chan error, 1)
	begin := time.Now()
	go func() { closed <- r.Close() }()
	for range 8 {
		select {
		case err := <-inflight:
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("operation in flight at Close: %v, want ErrUnavailable", err)
			}
		case <-time.After(hang):
			t.Fatalf("operations in flight at Close: unanswered after %s", hang)
		}
	}
	select {
	case err := <-closed:
		t.Logf("Close with operations in flight and the cluster stopped: %v after %s (op timeout %s)", err, time.Since(begin).Round(time.Millisecond), opTimeout)
	case <-time.After(hang):
		t.Fatalf("Close with the cluster stopped: no answer after %s", hang)
	}
	// After Close, a start completes at once with ErrClosed.
	if !r.StartReadAt(p, 0, w) {
		t.Fatal("start after Close refused; want an ErrClosed completion")
	}
	if err := <-w; !errors.Is(err, backend.ErrClosed) {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
}

// TestRBDAsyncBlocklisted: an asynchronous write of a fenced client fails
// with ErrUnavailable (ESHUTDOWN).
func TestRBDAsyncBlocklisted(t *testing.T) {
	r, c, image := openRBD(t, 8<<20, 512)
	defer r.Close()
	p := pageBuffer(t, 4096)
	w := make(aioWaiter, 1)
	if !r.StartWriteAt(p, 0, false, w) {
		t.Fatal("start refused")
	}
	if err := <-w; err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(r.CephClient().Addrs, "["), "]")
	addr, _, _ = strings.Cut(addr, ",")
	if out, err := c.Ceph("osd", "blocklist", "add", addr, "600"); err != nil {
		t.Fatalf("blocklist %s: %v\n%s", addr, err, out)
	}
	// As in TestRBDBlocklisted: another client, opened after the entry,
	// reads the block first, so that the OSD has the map with the entry
	// before the fenced client's write (which carries its older epoch)
	// reaches it. Without it the write was once accepted (the final CI's
	// loaded make test-rbd-run of session 8).
	other := must[*backend.RBD](t)(backend.OpenRBD(rbdOptions(c, image, 512)))
	defer other.Close()
	if err := other.ReadAt(pageBuffer(t, 4096), 0); err != nil {
		t.Fatalf("another client reads the block before the fenced client writes: %v", err)
	}
	if !r.StartWriteAt(p, 0, false, w) {
		t.Fatal("start refused")
	}
	select {
	case err := <-w:
		if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, syscall.ESHUTDOWN) {
			t.Errorf("asynchronous write of the fenced client: %v, want ErrUnavailable (ESHUTDOWN)", err)
		}
	case <-time.After(2 * time.Minute): // a hang guard
		t.Fatal("asynchronous write of the fenced client: no answer after 2 minutes")
	}
}
