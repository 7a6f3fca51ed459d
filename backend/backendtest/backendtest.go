// Package backendtest checks that a [backend.Backend] keeps the interface's
// contract: data round trips, zeroing, range and alignment errors, read-only
// behaviour, concurrency and Close. Run it from a test of any
// implementation, including ones outside this module:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			b, err := mybackend.Open(...) // a fresh, all-zeroes backend
//			if err != nil {
//				t.Fatal(err)
//			}
//			return b
//		}, backendtest.Options{})
//	}
package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// Factory returns a fresh backend that reads as all zeroes, of at least 8
// MiB, for one subtest. Run closes it (closing again must be harmless).
type Factory func(t *testing.T) backend.Backend

// Options describes deliberate departures from the contract.
type Options struct {
	// DiscardsWrites: reads return zeroes whatever was written (the null
	// backend).
	DiscardsWrites bool
}

// Run runs the conformance tests on backends from open.
func Run(t *testing.T, open Factory, opts Options) {
	c := &checker{open: open, opts: opts}
	t.Run("Geometry", c.geometry)
	t.Run("FreshReadsZeroes", c.freshReadsZeroes)
	t.Run("RoundTrip", c.roundTrip)
	t.Run("Ends", c.ends)
	t.Run("OutOfRange", c.outOfRange)
	t.Run("Unaligned", c.unaligned)
	t.Run("ZeroLength", c.zeroLength)
	t.Run("WriteZeroes", c.writeZeroes)
	t.Run("Discard", c.discard)
	t.Run("MisalignedBuffer", c.misalignedBuffer)
	t.Run("Concurrent", c.concurrent)
	t.Run("Health", c.health)
	t.Run("Close", c.close)
	t.Run("CloseDuringIO", c.closeDuringIO)
}

// RunReadOnly checks a read-only backend from open: reads work, every
// modification fails with ErrReadOnly, Flush succeeds.
func RunReadOnly(t *testing.T, open Factory) {
	b := open(t)
	defer b.Close()
	bs := int64(b.BlockSize())
	if !b.Info().ReadOnly {
		t.Errorf("Info().ReadOnly = false")
	}
	p := make([]byte, bs)
	if err := b.ReadAt(p, 0); err != nil {
		t.Errorf("ReadAt: %v", err)
	}
	if err := b.WriteAt(p, 0, false); !errors.Is(err, backend.ErrReadOnly) {
		t.Errorf("WriteAt: %v, want ErrReadOnly", err)
	}
	if err := b.WriteAt(p, 0, true); !errors.Is(err, backend.ErrReadOnly) {
		t.Errorf("WriteAt fua: %v, want ErrReadOnly", err)
	}
	if err := b.WriteZeroes(0, bs, true); !errors.Is(err, backend.ErrReadOnly) {
		t.Errorf("WriteZeroes: %v, want ErrReadOnly", err)
	}
	if err := b.Discard(0, bs); !errors.Is(err, backend.ErrReadOnly) {
		t.Errorf("Discard: %v, want ErrReadOnly", err)
	}
	if err := b.Flush(); err != nil {
		t.Errorf("Flush: %v", err)
	}
}

type checker struct {
	open Factory
	opts Options
}

func (c *checker) backend(t *testing.T) backend.Backend {
	t.Helper()
	b := c.open(t)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if b.Size() < 8<<20 {
		t.Fatalf("backend of %d bytes; the tests need at least 8 MiB", b.Size())
	}
	return b
}

// fill returns n bytes of a pattern unique to seed.
func fill(n int, seed uint64) []byte {
	p := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			p[j] = byte(v)
			v >>= 8
		}
	}
	return p
}

func (c *checker) want(p []byte) []byte {
	if c.opts.DiscardsWrites {
		return make([]byte, len(p))
	}
	return p
}

func (c *checker) read(t *testing.T, b backend.Backend, off, n int64) []byte {
	t.Helper()
	p := make([]byte, n)
	if err := b.ReadAt(p, off); err != nil {
		t.Fatalf("ReadAt(%d bytes at %d): %v", n, off, err)
	}
	return p
}

func (c *checker) write(t *testing.T, b backend.Backend, p []byte, off int64, fua bool) {
	t.Helper()
	if err := b.WriteAt(p, off, fua); err != nil {
		t.Fatalf("WriteAt(%d bytes at %d, fua %v): %v", len(p), off, fua, err)
	}
}

func (c *checker) geometry(t *testing.T) {
	b := c.backend(t)
	bs, size, info := b.BlockSize(), b.Size(), b.Info()
	if bs != 512 && bs != 4096 {
		t.Errorf("BlockSize() = %d, want 512 or 4096", bs)
	}
	if size <= 0 || size%int64(bs) != 0 {
		t.Errorf("Size() = %d, not a positive multiple of %d", size, bs)
	}
	if info.Size != size || info.BlockSize != bs {
		t.Errorf("Info() size %d block size %d, methods say %d and %d", info.Size, info.BlockSize, size, bs)
	}
	if info.Kind == "" {
		t.Errorf("Info().Kind is empty")
	}
	if a := info.BufferAlign; a == 0 || a&(a-1) != 0 {
		t.Errorf("Info().BufferAlign = %d, not a power of two", a)
	}
	if info.PhysicalBlockSize != 0 && info.PhysicalBlockSize < bs {
		t.Errorf("Info().PhysicalBlockSize %d < BlockSize %d", info.PhysicalBlockSize, bs)
	}
	if info.DiscardZeroes && !info.Discard {
		t.Errorf("Info().DiscardZeroes without Discard")
	}
}

func (c *checker) freshReadsZeroes(t *testing.T) {
	b := c.backend(t)
	size := b.Size()
	for _, off := range []int64{0, size / 2 &^ 4095, size - 64<<10} {
		if p := c.read(t, b, off, 64<<10); !bytes.Equal(p, make([]byte, len(p))) {
			t.Errorf("fresh backend: non-zero data at %d", off)
		}
	}
}

// roundTrip writes random blocks at random offsets, keeping a model of the
// expected contents of a window, and checks every read against it.
func (c *checker) roundTrip(t *testing.T) {
	b := c.backend(t)
	bs := int64(b.BlockSize())
	window := min(b.Size(), 8<<20)
	base := (b.Size() - window) / 2 &^ (bs - 1) // away from both ends
	model := make([]byte, window)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		n := (1 + r.Int64N(64)) * bs
		off := r.Int64N((window-n)/bs+1) * bs
		if r.IntN(3) == 0 {
			got := c.read(t, b, base+off, n)
			if !bytes.Equal(got, c.want(model[off:off+n])) {
				t.Fatalf("step %d: ReadAt(%d bytes at %d) differs from what was written", i, n, base+off)
			}
			continue
		}
		p := fill(int(n), uint64(i))
		c.write(t, b, p, base+off, r.IntN(4) == 0)
		copy(model[off:], p)
	}
	if err := b.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := c.read(t, b, base, window); !bytes.Equal(got, c.want(model)) {
		t.Fatalf("final read of the window differs from what was written")
	}
}

func (c *checker) ends(t *testing.T) {
	b := c.backend(t)
	bs, size := int64(b.BlockSize()), b.Size()
	first, last := fill(int(bs), 10), fill(int(bs), 11)
	c.write(t, b, first, 0, false)
	c.write(t, b, last, size-bs, true)
	if got := c.read(t, b, 0, bs); !bytes.Equal(got, c.want(first)) {
		t.Errorf("first block differs")
	}
	if got := c.read(t, b, size-bs, bs); !bytes.Equal(got, c.want(last)) {
		t.Errorf("last block differs")
	}
}

// calls runs each data method on a range and returns the errors by name.
func calls(b backend.Backend, off, n int64) map[string]error {
	var p []byte
	if n >= 0 && n <= 1<<20 {
		p = make([]byte, n)
	}
	errs := map[string]error{
		"WriteZeroes": b.WriteZeroes(off, n, false),
		"Discard":     b.Discard(off, n),
	}
	if p != nil {
		errs["ReadAt"] = b.ReadAt(p, off)
		errs["WriteAt"] = b.WriteAt(p, off, false)
	}
	return errs
}

func (c *checker) outOfRange(t *testing.T) {
	b := c.backend(t)
	bs, size := int64(b.BlockSize()), b.Size()
	for _, r := range []struct{ off, n int64 }{
		{-bs, bs},
		{size, bs},
		{size - bs, 2 * bs},
		{size + bs, 0},
		{0, size + bs},
		{0, -bs},
		{math.MaxInt64 &^ (bs - 1), bs},
		{bs, math.MaxInt64 &^ (bs - 1)},
	} {
		for name, err := range calls(b, r.off, r.n) {
			var re *backend.RangeError
			if !errors.Is(err, backend.ErrOutOfRange) || !errors.As(err, &re) {
				t.Errorf("%s(off %d, len %d) = %v, want a *RangeError matching ErrOutOfRange", name, r.off, r.n, err)
			}
		}
	}
}

func (c *checker) unaligned(t *testing.T) {
	b := c.backend(t)
	bs := int64(b.BlockSize())
	for _, r := range []struct{ off, n int64 }{{1, bs}, {bs / 2, bs}, {0, bs + 1}, {bs, bs - 8}} {
		for name, err := range calls(b, r.off, r.n) {
			if !errors.Is(err, backend.ErrUnaligned) {
				t.Errorf("%s(off %d, len %d) = %v, want ErrUnaligned", name, r.off, r.n, err)
			}
		}
	}
}

func (c *checker) zeroLength(t *testing.T) {
	b := c.backend(t)
	for _, off := range []int64{0, b.Size()} {
		for name, err := range calls(b, off, 0) {
			if err != nil {
				t.Errorf("%s(off %d, len 0) = %v, want nil", name, off, err)
			}
		}
	}
}

// zeroCase lays data over a span, zeroes the middle with zeroFn and checks
// that the middle reads as zeroes (if mustZero) and the edges are intact.
func (c *checker) zeroCase(t *testing.T, b backend.Backend, name string, off, n int64, mustZero bool, zeroFn func(off, n int64) error) {
	t.Helper()
	bs := int64(b.BlockSize())
	pre, post := min(off, 4*bs), min(b.Size()-off-n, 4*bs)
	data := fill(int(pre+n+post), uint64(off^n))
	c.write(t, b, data, off-pre, false)
	if err := zeroFn(off, n); err != nil {
		t.Fatalf("%s(%d, %d): %v", name, off, n, err)
	}
	got := c.read(t, b, off-pre, pre+n+post)
	want := c.want(data)
	if !bytes.Equal(got[:pre], want[:pre]) || !bytes.Equal(got[pre+n:], want[pre+n:]) {
		t.Errorf("%s(%d, %d) changed data outside the range", name, off, n)
	}
	if mustZero && !bytes.Equal(got[pre:pre+n], make([]byte, n)) {
		t.Errorf("%s(%d, %d): the range does not read as zeroes", name, off, n)
	}
}

// zeroRanges are (offset, length) pairs in blocks and MiB, chosen to be
// whole, partial and spanning the memory backend's 1 MiB chunks.
func zeroRanges(bs, size int64) [][2]int64 {
	const mib = 1 << 20
	rs := [][2]int64{
		{8 * bs, bs},
		{16 * bs, 16 * bs},
		{mib - 2*bs, 4 * bs},
		{mib, mib},
		{mib / 2, 2 * mib},
		{size - 2*mib, 2 * mib},
	}
	var ok [][2]int64
	for _, r := range rs {
		if r[0] >= 0 && r[0]+r[1] <= size {
			ok = append(ok, r)
		}
	}
	return ok
}

func (c *checker) writeZeroes(t *testing.T) {
	b := c.backend(t)
	for _, dealloc := range []bool{false, true} {
		for _, r := range zeroRanges(int64(b.BlockSize()), b.Size()) {
			c.zeroCase(t, b, fmt.Sprintf("WriteZeroes(deallocate=%v)", dealloc), r[0], r[1], true,
				func(off, n int64) error { return b.WriteZeroes(off, n, dealloc) })
		}
	}
}

func (c *checker) discard(t *testing.T) {
	b := c.backend(t)
	info := b.Info()
	if !info.Discard {
		if err := b.Discard(0, int64(b.BlockSize())); !errors.Is(err, backend.ErrNotSupported) {
			t.Errorf("Discard without Info().Discard = %v, want ErrNotSupported", err)
		}
		return
	}
	for _, r := range zeroRanges(int64(b.BlockSize()), b.Size()) {
		c.zeroCase(t, b, "Discard", r[0], r[1], info.DiscardZeroes, b.Discard)
	}
}

func (c *checker) misalignedBuffer(t *testing.T) {
	b := c.backend(t)
	bs := int64(b.BlockSize())
	for _, n := range []int64{bs, 8 * bs, 1 << 20} {
		for _, skew := range []int{1, 8, 512} {
			buf := make([]byte, int(n)+skew)[skew:]
			copy(buf, fill(int(n), uint64(n)+uint64(skew)))
			want := bytes.Clone(buf)
			off := 3 * n
			c.write(t, b, buf, off, skew == 8)
			got := make([]byte, int(n)+skew)[skew:]
			if err := b.ReadAt(got, off); err != nil {
				t.Fatalf("ReadAt into a buffer at +%d: %v", skew, err)
			}
			if !bytes.Equal(got, c.want(want)) {
				t.Errorf("%d bytes through a buffer at +%d: data differs", n, skew)
			}
		}
	}
}

// concurrent has goroutines each own a region and write, read back and
// zero it, while others flush and query; run with -race.
func (c *checker) concurrent(t *testing.T) {
	b := c.backend(t)
	bs := int64(b.BlockSize())
	const workers = 8
	region := min(b.Size()/workers, 1<<20) &^ (bs - 1)
	var wg sync.WaitGroup
	errs := make(chan error, workers+2)
	for w := range workers {
		wg.Go(func() {
			base := int64(w) * region
			r := rand.New(rand.NewPCG(uint64(w), 7))
			buf := make([]byte, region)
			for i := range 50 {
				n := (1 + r.Int64N(16)) * bs
				off := base + r.Int64N((region-n)/bs+1)*bs
				p := fill(int(n), uint64(w*1000+i))
				if err := b.WriteAt(p, off, i%5 == 0); err != nil {
					errs <- err
					return
				}
				if err := b.ReadAt(buf[:n], off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf[:n], c.want(p)) {
					errs <- fmt.Errorf("worker %d: read back %d bytes at %d: data differs", w, n, off)
					return
				}
				if i%10 == 0 {
					if err := b.WriteZeroes(off, n, i%20 == 0); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := b.Flush(); err != nil {
				errs <- err
				return
			}
			_ = b.Info()
			_, _ = b.Health()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (c *checker) health(t *testing.T) {
	b := c.backend(t)
	h, err := b.Health()
	if err == nil && !h.Available && h.Reason == "" {
		t.Errorf("Health() not available and no reason given")
	}
	if h.Available && h.Valid == 0 {
		t.Errorf("Health() available but no field valid")
	}
}

func (c *checker) close(t *testing.T) {
	b := c.open(t)
	size, bs, info := b.Size(), b.BlockSize(), b.Info()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	p := make([]byte, bs)
	if err := b.ReadAt(p, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("ReadAt after Close: %v, want ErrClosed", err)
	}
	if err := b.WriteAt(p, 0, false); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("WriteAt after Close: %v, want ErrClosed", err)
	}
	if err := b.Flush(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
	if err := b.WriteZeroes(0, int64(bs), false); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("WriteZeroes after Close: %v, want ErrClosed", err)
	}
	if b.Size() != size || b.BlockSize() != bs || b.Info() != info {
		t.Errorf("Size, BlockSize or Info changed after Close")
	}
}

// closeDuringIO closes while goroutines do I/O: every call must succeed or
// fail with ErrClosed, never with another error.
func (c *checker) closeDuringIO(t *testing.T) {
	b := c.open(t)
	bs := int64(b.BlockSize())
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			p := make([]byte, 16*bs)
			<-start
			for i := 0; ; i++ {
				off := int64(w) * 16 * bs
				var err error
				if i%2 == 0 {
					err = b.WriteAt(p, off, false)
				} else {
					err = b.ReadAt(p, off)
				}
				if errors.Is(err, backend.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("I/O racing Close: %v, want nil or ErrClosed", err)
	}
}
