package vblock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const waitLimit = 2 * time.Minute

// tempDevice is a file of size bytes as a Device.
func tempDevice(t *testing.T, size int64) (*os.File, Device) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "dev"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	d, err := File(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, d
}

// written is the number of blocks w submitted a write of (after Stop:
// how many blocks each worker reached depends on the scheduler).
func written(w *Workload) int64 {
	n := int64(0)
	for _, s := range w.submitted {
		if s > 0 {
			n++
		}
	}
	return n
}

// waitWrites waits until the workload has done n writes.
func waitWrites(t *testing.T, w *Workload, n int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for w.Stats().Writes < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d writes within %v: %+v", n, waitLimit, w.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStampRoundTrip(t *testing.T) {
	for _, bs := range []int{MinBlockSize, 512, 4096, 4100} {
		b := make([]byte, bs)
		s := stamp{run: 7, block: 3, seq: 9, writer: 0x10002}
		s.fill(b)
		got, kind := parse(b, 7)
		if kind != kindOurs || got != s {
			t.Fatalf("block size %d: parsed %+v %v, want %+v", bs, got, kind, s)
		}
		if _, kind := parse(b, 8); kind != kindNotOurs {
			t.Errorf("block size %d: another run's block parsed as %v", bs, kind)
		}
		// Two versions differ in every 512-byte sector, so a block torn
		// anywhere between them fails its checksum.
		old := make([]byte, bs)
		stamp{run: 7, block: 3, seq: 8}.fill(old)
		for cut := hdrSeq + 8; cut < bs; cut += 8 { // before: the same bytes
			torn := append(append([]byte(nil), b[:cut]...), old[cut:]...)
			if _, kind := parse(torn, 7); kind != kindTorn {
				t.Fatalf("block size %d: torn at %d parsed as %v", bs, cut, kind)
			}
		}
	}
	b := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() {
		stamp{run: 1, block: 2, seq: 3}.fill(b)
		parse(b, 1)
	}); n != 0 {
		t.Errorf("%v allocations per fill and parse, want 0", n)
	}
}

// TestSweep runs the workload on a file, then changes blocks behind its
// back the ways a misbehaving storage path would, and checks that the
// sweep classifies each.
func TestSweep(t *testing.T) {
	const bs, blocks, devBlocks = 4096, 64, 80
	f, dev := tempDevice(t, devBlocks*bs)
	w, err := Start(dev, Config{BlockSize: bs, Blocks: blocks, Workers: 4, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, w, 2000)
	r := w.Sweep(context.Background(), dev)
	if err := r.Err(); err != nil {
		t.Fatalf("clean run: %v\n%s", err, r)
	}
	nw := written(w)
	if r.Blocks != devBlocks || r.Current != nw || r.Untouched != devBlocks-nw || r.Later != 0 || r.Unsettled != 0 {
		t.Fatalf("clean run: %s", r)
	}
	if r.Workload.Reads != r.Workload.Writes || r.Workload.Writes < 2000 {
		t.Errorf("clean run: %d writes, %d reads back", r.Workload.Writes, r.Workload.Reads)
	}
	t.Logf("clean run: %s", r)

	// Pick a block written at least twice.
	blk := int64(-1)
	for i, a := range w.acked {
		if a >= 2 {
			blk = int64(i)
			break
		}
	}
	if blk < 0 {
		t.Fatal("no block written twice")
	}
	acked := w.acked[blk]
	block := func(b int64, seq uint64) []byte {
		p := make([]byte, bs)
		stamp{run: w.run, block: uint64(b), seq: seq, writer: 1}.fill(p)
		return p
	}
	cur := block(blk, acked)
	torn := append(block(blk, acked)[:bs/2], block(blk, acked-1)[bs/2:]...)
	for _, tc := range []struct {
		name      string
		data      []byte
		submitted uint64 // if not 0: pretend writes up to this one were submitted, not acknowledged
		check     func(*Report) bool
		fails     bool
	}{
		{"regressed", block(blk, acked-1), 0, func(r *Report) bool { return r.Regressed == 1 && r.Bad[0].Class == "regressed" }, true},
		{"torn", torn, 0, func(r *Report) bool { return r.Torn == 1 }, true},
		{"zeroes", make([]byte, bs), 0, func(r *Report) bool { return r.Foreign == 1 }, true},
		{"another run", func() []byte {
			p := make([]byte, bs)
			stamp{run: w.run + 1, block: uint64(blk), seq: acked}.fill(p)
			return p
		}(), 0,
			func(r *Report) bool { return r.Foreign == 1 }, true},
		{"misplaced", block(blk+1, acked), 0, func(r *Report) bool { return r.Misplaced == 1 }, true},
		{"never submitted", block(blk, acked+1), 0, func(r *Report) bool { return r.Future == 1 }, true},
		{"later, not acknowledged", block(blk, acked+1), acked + 1, func(r *Report) bool { return r.Later == 1 && r.Current == nw-1 }, false},
		{"current, later not acknowledged", cur, acked + 2, func(r *Report) bool { return r.Current == nw }, false},
		{"torn by a write not acknowledged", torn, acked + 1, func(r *Report) bool { return r.Unsettled == 1 }, false},
		{"zeroes with a write not acknowledged", make([]byte, bs), acked + 1, func(r *Report) bool { return r.Foreign == 1 }, true},
		{"written past the workload's blocks", block(blocks+3, 1), 0, func(r *Report) bool { return r.Future == 1 && r.Untouched == devBlocks-nw-1 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := blk
			if strings.HasPrefix(tc.name, "written past") {
				at = blocks + 3
			}
			old := make([]byte, bs)
			if _, err := f.ReadAt(old, at*bs); err != nil {
				t.Fatal(err)
			}
			defer f.WriteAt(old, at*bs)
			if _, err := f.WriteAt(tc.data, at*bs); err != nil {
				t.Fatal(err)
			}
			if tc.submitted != 0 {
				defer func(s uint64) { w.submitted[blk] = s }(w.submitted[blk])
				w.submitted[blk] = tc.submitted
			}
			r := w.Sweep(context.Background(), dev)
			if !tc.check(r) || (r.Err() != nil) != tc.fails {
				t.Fatalf("%s (error: %v)", r, r.Err())
			}
			if tc.fails {
				t.Logf("%v", r.Err())
			}
		})
	}
}

// TestTwoRanges: two workloads on disjoint ranges of one device; each
// sweep finds its own blocks current and the other's untouched.
func TestTwoRanges(t *testing.T) {
	_, dev := tempDevice(t, 64*512)
	w1, err := Start(dev, Config{BlockSize: 512, Blocks: 16, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := Start(dev, Config{BlockSize: 512, First: 16, Blocks: 32, Workers: 3, Writer: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, w1, 500)
	waitWrites(t, w2, 500)
	w1.Stop()
	w2.Stop()
	r1, r2 := w1.Sweep(context.Background(), dev), w2.Sweep(context.Background(), dev)
	if n := written(w1); r1.Err() != nil || r1.Current != n || r1.Untouched != 64-n {
		t.Errorf("first: %s: %v", r1, r1.Err())
	}
	if n := written(w2); r2.Err() != nil || r2.Current != n || r2.Untouched != 64-n {
		t.Errorf("second: %s: %v", r2, r2.Err())
	}
	if _, err := Start(dev, Config{BlockSize: 512, First: 60, Blocks: 5}); err == nil {
		t.Error("a range past the end accepted")
	}
}

// TestWriteErrors: writes the device refuses (a file opened read-only:
// EBADF) are counted and leave their blocks unsettled, not wrong.
func TestWriteErrors(t *testing.T) {
	f, _ := tempDevice(t, 16*4096)
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	dev, err := File(ro)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Start(dev, Config{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for w.Stats().WriteErrors < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("write errors: %+v", w.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	r := w.Sweep(context.Background(), dev)
	err = r.Err()
	if err == nil || r.Regressed+r.Torn+r.Foreign != 0 || r.Unsettled != written(w) || r.Untouched != 16-written(w) || !errors.Is(err, os.ErrClosed) && !strings.Contains(err.Error(), "bad file descriptor") {
		t.Fatalf("%s: %v", r, err)
	}
	t.Logf("%v", err)
}

// twoPaths is a file as a PathDevice whose I/O "completes" through the
// path named in cur.
type twoPaths struct {
	Device
	cur atomic.Pointer[string]
}

func (d *twoPaths) ReadAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	_, err := d.ReadAtContext(ctx, p, off)
	return *d.cur.Load(), err
}

func (d *twoPaths) WriteAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	_, err := d.WriteAtContext(ctx, p, off)
	return *d.cur.Load(), err
}

func TestPaths(t *testing.T) {
	_, f := tempDevice(t, 64*4096)
	d := &twoPaths{Device: f}
	a, b := "a", "b"
	d.cur.Store(&a)
	w, err := Start(d, Config{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := w.WaitCompletions(ctx, "a", time.Time{}, 100); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	d.cur.Store(&b)
	if err := w.WaitCompletions(ctx, "b", switched, 100); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if n := w.CompletionsSince("b", time.Time{}); n < 100 || int64(n) != w.Completions("b") {
		t.Errorf("%d completions through b since the start, %d in all", n, w.Completions("b"))
	}
	// Writes in flight at the switch may still complete as "a".
	if n := w.CompletionsSince("a", switched); n > 2 {
		t.Errorf("%d completions through a after the switch", n)
	}
	if before, after := w.CompletionsBetween("a", time.Time{}, switched), w.CompletionsBetween("a", switched, time.Time{}); int64(before+after) != w.Completions("a") {
		t.Errorf("completions through a: %d before the switch + %d after != %d in all", before, after, w.Completions("a"))
	}
	if n, m := w.CompletionsBetween("b", switched, time.Time{}), w.CompletionsSince("b", switched); n != m {
		t.Errorf("completions through b since the switch: %d between, %d since", n, m)
	}
	lastA, ok1 := w.LastCompletion("a")
	firstB, ok2 := w.FirstCompletion("b", time.Time{})
	if !ok1 || !ok2 || firstB.Before(switched) {
		t.Errorf("last through a %v %v, first through b %v %v, switched at %v", lastA, ok1, firstB, ok2, switched)
	}
	if _, ok := w.FirstCompletion("c", time.Time{}); ok {
		t.Error("a completion through c")
	}
	stall, err := w.Stall("a", switched)
	if err != nil || stall < 0 || stall > waitLimit {
		t.Errorf("stall %v, %v", stall, err)
	}
	// Writes in flight at the switch may complete as "a" after some
	// completed as "b" (above): b is never left after a's last completion.
	if _, err := w.Stall("b", lastA.Add(time.Nanosecond)); err == nil {
		t.Error("a stall away from b, which was never left")
	}
	r := w.Sweep(ctx, d)
	if err := r.Err(); err != nil || r.Paths["a"]+r.Paths["b"] != r.Workload.Writes {
		t.Fatalf("%s: %v", r, err)
	}
	t.Log(r)
}

// TestBlockDevice runs the workload on a loop device, a Linux block
// device opened as the Linux host's tests open an NVMe namespace.
func TestBlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device (losetup)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("needs losetup (util-linux)")
	}
	backing, _ := tempDevice(t, 4<<20)
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", "4096", backing.Name()).CombinedOutput()
	if err != nil {
		t.Skipf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "-d", loop).Run()
	f, err := os.OpenFile(loop, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dev, err := File(f)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Size() != 4<<20 {
		t.Fatalf("%s: size %d", loop, dev.Size())
	}
	w, err := Start(dev, Config{Workers: 4, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, w, 1000)
	r := w.Sweep(context.Background(), dev)
	if err := r.Err(); err != nil || r.Current+r.Untouched != r.Blocks {
		t.Fatalf("%s: %v", r, err)
	}
	t.Logf("%s: %s", loop, r)
}

// TestWorkloadAllocs: the workload's I/O loop does not allocate per I/O
// (on a file: the device's own calls do not either).
func TestWorkloadAllocs(t *testing.T) {
	_, dev := tempDevice(t, 256*4096)
	w, err := Start(dev, Config{Workers: 2, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	waitWrites(t, w, 200) // the workers' buffers are made
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	n0 := w.Stats().Writes
	waitWrites(t, w, n0+5000)
	runtime.ReadMemStats(&m1)
	n := w.Stats().Writes - n0
	if per := float64(m1.Mallocs-m0.Mallocs) / float64(n); per > 0.05 {
		t.Errorf("%.3f allocations per verified write (%d in %d writes), want none", per, m1.Mallocs-m0.Mallocs, n)
	}
}

// giveUps is a file as a GiveUpDevice: every write is first given up on
// path "a" (its bytes kept, as a target that still holds it), then
// written and acknowledged through "b".
type giveUps struct {
	twoPaths
	mu    sync.Mutex
	stale map[int64][]byte // the first given-up write of each offset
}

func (d *giveUps) WriteAtGiveUps(ctx context.Context, p []byte, off int64, gaveUp func(string, error)) (string, error) {
	d.mu.Lock()
	if _, ok := d.stale[off]; !ok {
		d.stale[off] = slices.Clone(p)
	}
	d.mu.Unlock()
	gaveUp("a", errors.New("keep alive timeout"))
	_, err := d.WriteAtContext(ctx, p, off)
	return "b", err
}

// TestAttempts: with Config.Attempts the workload records each path a
// write was given up on and its end; a given-up write that lands late
// (written after the workload stopped) is a regressed block whose
// sequence the record names as given up on "a".
func TestAttempts(t *testing.T) {
	_, f := tempDevice(t, 64*4096)
	d := &giveUps{twoPaths: twoPaths{Device: f}, stale: map[int64][]byte{}}
	w, err := Start(d, Config{Workers: 4, Blocks: 8, Attempts: true})
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, w, 100)
	w.Stop()
	// The first write of a block written more than once lands late (which
	// blocks got more than one write depends on the scheduling of the
	// workers: pick one).
	blk := int64(-1)
	for j, a := range w.acked {
		if a > 1 {
			blk = int64(j)
			break
		}
	}
	if blk < 0 {
		t.Fatalf("no block written twice in %d writes: %v", w.writes.Load(), w.acked)
	}
	if _, err := f.WriteAtContext(context.Background(), d.stale[blk*4096], blk*4096); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r := w.Sweep(ctx, f)
	if r.Regressed != 1 || len(r.RegressedBlocks) != 1 || r.RegressedBlocks[0].Block != blk || r.RegressedBlocks[0].Found != 1 {
		t.Fatalf("%s: %v", r, r.RegressedBlocks)
	}
	var gaveUp, acked bool
	for _, a := range w.Attempts(blk) {
		if a.Seq == 1 && a.Path == "a" && !a.Acked && a.Err != nil {
			gaveUp = true
		}
		if a.Seq == 1 && a.Path == "b" && a.Acked && !a.At.Before(a.Sent) {
			acked = true
		}
	}
	if !gaveUp || !acked {
		t.Errorf("block %d seq 1: given up on a %v, acknowledged through b %v: %v", blk, gaveUp, acked, w.Attempts(blk))
	}
	if n, writes := len(w.GivenUp("a")), r.Workload.Writes; int64(n) != writes {
		t.Errorf("%d writes given up on a, %d writes", n, writes)
	}
}
