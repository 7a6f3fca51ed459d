// Package vblock is the core of the verified workload of the failover
// and multipath tests (test support only: no product package may import
// it; the archtest checks). Tests use it through package verify, which
// adds the Go host's multipath head (verify.Head); the initiator
// package's own tests, which verify cannot serve (it imports the
// initiator), use it directly.
//
// Every write of a block carries (run, block number, sequence, writer) and
// a checksum in its bytes. The Workload records, per block, the last
// sequence a write of it was acknowledged with and the highest sequence
// ever submitted for it; each block belongs to one worker, which has at
// most one write of it in flight, so the order of a block's writes is the
// order of their acknowledgements. Sweep reads the whole device at the end
// and checks that every block holds its acknowledged sequence or a later
// submitted one: never an older one (a write the host gave up on, or a
// stale gateway's, that landed late), never a torn or foreign block.
//
// It runs over a Device: an initiator Head or Namespace (the Go host), or
// a block device of the Linux host (File, or OpenDirect as the Linux
// host's writer, verify/cmd/vwriter, opens it). A Device that tells
// through which path each I/O completed (PathDevice; verify.Head gives
// one) gets the completions counted per path, with their times.
package vblock

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Device is what the workload writes and Sweep reads: the methods of
// initiator.Head and initiator.Namespace; File adapts a block device.
type Device interface {
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
	// Size is the device's size in bytes.
	Size() int64
}

// Aligner is a Device whose I/O buffers must be aligned (a block device
// opened with O_DIRECT: OpenDirect). The workload and Sweep take their
// buffers from it.
type Aligner interface {
	// Buffer returns a buffer of n bytes fit for the device's I/O.
	Buffer(n int) []byte
}

// buffer returns an I/O buffer of n bytes for dev.
func buffer(dev Device, n int) []byte {
	if a, ok := dev.(Aligner); ok {
		return a.Buffer(n)
	}
	return make([]byte, n)
}

// PathDevice is a Device that tells which path completed each I/O (a
// multipath head).
type PathDevice interface {
	Device
	// ReadAtPath and WriteAtPath are ReadAtContext and WriteAtContext of
	// len(p) bytes that also return the path of the completion ("" if
	// none completed it).
	ReadAtPath(ctx context.Context, p []byte, off int64) (path string, err error)
	WriteAtPath(ctx context.Context, p []byte, off int64) (path string, err error)
}

// GiveUpDevice is a PathDevice that also tells each path a write was
// given up on (a path error: the host sent it again on another path)
// before its end.
type GiveUpDevice interface {
	PathDevice
	// WriteAtGiveUps is WriteAtPath that calls gaveUp (on another
	// goroutine, before it returns) for each path the write was given up
	// on, with the path error.
	WriteAtGiveUps(ctx context.Context, p []byte, off int64, gaveUp func(path string, err error)) (path string, err error)
}

// Attempt is what became of one write (block, sequence) on one path: it
// was acknowledged through it, or given up on it (the host sent it again
// elsewhere, or failed it). A write given up on a path whose target did
// not answer may still land through that path later: a sweep that finds
// a block regressed to such a write's sequence names the path it came
// through.
type Attempt struct {
	Block int64
	Seq   uint64
	// Path is the controller's address ("" if none took the write).
	Path string
	// Sent is when the workload submitted the write (its first path);
	// At when the host learnt this outcome.
	Sent, At time.Time
	// Acked: the write completed successfully through Path (its end).
	Acked bool
	// Err is why it was given up on Path, or the write's error (its end).
	Err error
}

func (a Attempt) String() string {
	what := "acknowledged"
	if !a.Acked {
		what = fmt.Sprintf("given up (%v)", a.Err)
	}
	return fmt.Sprintf("block %d seq %d through %q: sent %s, %s at %s", a.Block, a.Seq, a.Path,
		a.Sent.Format("15:04:05.000"), what, a.At.Format("15:04:05.000"))
}

// Config is a workload's shape.
type Config struct {
	// BlockSize is the size of one versioned block (at least
	// MinBlockSize; a multiple of the device's block size). Default 4096.
	BlockSize int
	// First is the first block written (default 0).
	First int64
	// Blocks is the number of blocks written, from First. Default: the
	// rest of the device. Workloads on disjoint ranges share a device:
	// each sweep sees the other's blocks as untouched (another run).
	Blocks int64
	// Workers is the number of concurrent writers (each owns the blocks
	// First+i, First+i+Workers, …; i its index). Default 8, at most 65536.
	Workers int
	// ReadBack reads each block back after its acknowledged write and
	// checks it holds that write (as the earlier multipath tests did).
	ReadBack bool
	// Writer is stored in every block beside the worker's index (high 16
	// bits): tells two workloads on one device apart.
	Writer uint16
	// Attempts records, for every write, each path it was given up on
	// and its end (Workload.Attempts; with a GiveUpDevice: a multipath
	// head).
	Attempts bool
}

// Workload is a running verified workload.
type Workload struct {
	dev  Device
	pdev PathDevice   // dev, if it tells paths
	gdev GiveUpDevice // dev, if it tells the paths writes were given up on
	cfg  Config
	run  uint64

	// Per block, written only by its worker (read after Stop): the last
	// acknowledged and the highest submitted sequence.
	acked, submitted []uint64

	writes, reads                     atomic.Int64 // successful
	writeErrs, readErrs, readBackErrs atomic.Int64
	errMu                             sync.Mutex
	errs                              []error // the first few
	paths                             pathLog
	attMu                             sync.Mutex
	attempts                          []Attempt
	stop                              chan struct{}
	stopOnce                          sync.Once
	wg                                sync.WaitGroup
}

const keepErrors = 8

// Start starts a workload on dev.
func Start(dev Device, cfg Config) (*Workload, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4096
	}
	if cfg.BlockSize < MinBlockSize {
		return nil, fmt.Errorf("verify: block size %d < %d", cfg.BlockSize, MinBlockSize)
	}
	max := dev.Size()/int64(cfg.BlockSize) - cfg.First
	if cfg.Blocks == 0 {
		cfg.Blocks = max
	}
	if cfg.First < 0 || cfg.Blocks <= 0 || cfg.Blocks > max {
		return nil, fmt.Errorf("verify: blocks %d..%d of %d bytes on a device of %d bytes", cfg.First, cfg.First+cfg.Blocks-1, cfg.BlockSize, dev.Size())
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if int64(cfg.Workers) > cfg.Blocks {
		cfg.Workers = int(cfg.Blocks)
	}
	if cfg.Workers < 0 || cfg.Workers > 1<<16 {
		return nil, fmt.Errorf("verify: %d workers (1 to 65536)", cfg.Workers)
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	w := &Workload{
		dev: dev, cfg: cfg, run: binary.LittleEndian.Uint64(rb[:]),
		acked: make([]uint64, cfg.Blocks), submitted: make([]uint64, cfg.Blocks),
		stop: make(chan struct{}),
	}
	w.pdev, _ = dev.(PathDevice)
	if cfg.Attempts {
		w.gdev, _ = dev.(GiveUpDevice)
	}
	for i := range cfg.Workers {
		w.wg.Go(func() { w.worker(i) })
	}
	return w, nil
}

// Stop stops the workload and waits for every I/O in flight to complete.
func (w *Workload) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *Workload) fail(c *atomic.Int64, err error) {
	c.Add(1)
	w.errMu.Lock()
	if len(w.errs) < keepErrors {
		w.errs = append(w.errs, err)
	}
	w.errMu.Unlock()
}

func (w *Workload) do(write bool, p []byte, off int64) error {
	ctx := context.Background()
	var path string
	var err error
	switch {
	case w.gdev != nil && write:
		path, err = w.writeAttempts(ctx, p, off)
	case w.pdev != nil && write:
		path, err = w.pdev.WriteAtPath(ctx, p, off)
	case w.pdev != nil:
		path, err = w.pdev.ReadAtPath(ctx, p, off)
	case write:
		_, err = w.dev.WriteAtContext(ctx, p, off)
	default:
		_, err = w.dev.ReadAtContext(ctx, p, off)
	}
	if err == nil && path != "" {
		w.paths.record(path)
	}
	return err
}

// writeAttempts writes p at off through gdev and records the paths it
// was given up on and its end.
func (w *Workload) writeAttempts(ctx context.Context, p []byte, off int64) (string, error) {
	st, _ := parse(p, w.run)
	blk, seq, sent := int64(st.block), st.seq, time.Now()
	path, err := w.gdev.WriteAtGiveUps(ctx, p, off, func(path string, err error) {
		w.attMu.Lock()
		w.attempts = append(w.attempts, Attempt{Block: blk, Seq: seq, Path: path, Sent: sent, At: time.Now(), Err: err})
		w.attMu.Unlock()
	})
	w.attMu.Lock()
	w.attempts = append(w.attempts, Attempt{Block: blk, Seq: seq, Path: path, Sent: sent, At: time.Now(), Acked: err == nil, Err: err})
	w.attMu.Unlock()
	return path, err
}

// Attempts returns what became of each write of block on each path, in
// the order the host learnt it (Config.Attempts).
func (w *Workload) Attempts(block int64) []Attempt {
	w.attMu.Lock()
	defer w.attMu.Unlock()
	var out []Attempt
	for _, a := range w.attempts {
		if a.Block == block {
			out = append(out, a)
		}
	}
	return out
}

// GivenUp returns the attempts given up on path (Config.Attempts).
func (w *Workload) GivenUp(path string) []Attempt {
	w.attMu.Lock()
	defer w.attMu.Unlock()
	var out []Attempt
	for _, a := range w.attempts {
		if a.Path == path && !a.Acked {
			out = append(out, a)
		}
	}
	return out
}

// worker writes the blocks First+i, First+i+Workers, … in a random order
// (a block at a time), each with a sequence one higher than the last.
func (w *Workload) worker(i int) {
	bs := w.cfg.BlockSize
	wbuf, rbuf := buffer(w.dev, bs), buffer(w.dev, bs)
	owned := (w.cfg.Blocks - int64(i) + int64(w.cfg.Workers) - 1) / int64(w.cfg.Workers)
	x := w.run ^ uint64(i+1)*0x9e3779b97f4a7c15 | 1
	writer := uint32(w.cfg.Writer)<<16 | uint32(i)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		hi, _ := bits.Mul64(x, uint64(owned))
		j := int64(i) + int64(hi)*int64(w.cfg.Workers) // index in acked, submitted
		blk := w.cfg.First + j
		seq := w.submitted[j] + 1
		w.submitted[j] = seq
		st := stamp{run: w.run, block: uint64(blk), seq: seq, writer: writer}
		st.fill(wbuf)
		off := blk * int64(bs)
		if err := w.do(true, wbuf, off); err != nil {
			w.fail(&w.writeErrs, fmt.Errorf("write block %d seq %d: %w", blk, seq, err))
			continue
		}
		w.acked[j] = seq
		w.writes.Add(1)
		if !w.cfg.ReadBack {
			continue
		}
		if err := w.do(false, rbuf, off); err != nil {
			w.fail(&w.readErrs, fmt.Errorf("read block %d: %w", blk, err))
			continue
		}
		w.reads.Add(1)
		if got, kind := parse(rbuf, w.run); kind != kindOurs || got.block != uint64(blk) || got.seq != seq {
			w.fail(&w.readBackErrs, fmt.Errorf("block %d read back after the write of seq %d: %s", blk, seq, describe(got, kind)))
		}
	}
}

func describe(s stamp, k blockKind) string {
	switch k {
	case kindNotOurs:
		return "not written by this run"
	case kindTorn:
		return "torn (checksum mismatch)"
	}
	return fmt.Sprintf("block %d seq %d writer %#x", s.block, s.seq, s.writer)
}

// Stats are a workload's counters.
type Stats struct {
	// Writes and Reads are the successful I/Os.
	Writes, Reads int64
	// WriteErrors, ReadErrors: I/Os that failed; ReadBackErrors: reads
	// back that did not find the write just acknowledged.
	WriteErrors, ReadErrors, ReadBackErrors int64
	// Errors are the first few errors (in JSON: ErrorTexts, by Summary).
	Errors []error `json:"-"`
}

// Stats returns the workload's counters so far.
func (w *Workload) Stats() Stats {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return Stats{
		Writes: w.writes.Load(), Reads: w.reads.Load(),
		WriteErrors: w.writeErrs.Load(), ReadErrors: w.readErrs.Load(), ReadBackErrors: w.readBackErrs.Load(),
		Errors: slices.Clone(w.errs),
	}
}

// Err is nil if no I/O failed and every read back found its write.
func (s Stats) Err() error {
	if s.WriteErrors == 0 && s.ReadErrors == 0 && s.ReadBackErrors == 0 {
		return nil
	}
	return fmt.Errorf("verify: %d write errors, %d read errors, %d reads back without their write (first: %w)",
		s.WriteErrors, s.ReadErrors, s.ReadBackErrors, errors.Join(s.Errors...))
}

// Run is the workload's random identity, stored in every block it writes.
func (w *Workload) Run() uint64 { return w.run }

// Block result classes of a Sweep.
const (
	classRegressed = iota // an older sequence than the last acknowledged
	classTorn
	classForeign
	classFuture
	classMisplaced
	classes
)

var classNames = [classes]string{"regressed", "torn", "foreign", "beyond the last submitted", "misplaced"}

// BadBlock is one block a Sweep found wrong.
type BadBlock struct {
	Block int64
	// Class: "regressed", "torn", "foreign", "beyond the last submitted",
	// "misplaced" (another block's write).
	Class string
	// Found is the block's sequence (0 if it holds none of this run).
	Found uint64
	// Acked and Submitted are what the workload recorded for it.
	Acked, Submitted uint64
}

func (b BadBlock) String() string {
	return fmt.Sprintf("block %d %s: holds seq %d, acknowledged %d, submitted %d", b.Block, b.Class, b.Found, b.Acked, b.Submitted)
}

// Report is the result of a Sweep.
type Report struct {
	// Blocks is the number of blocks read: the whole device.
	Blocks int64
	// Current: the last acknowledged sequence; Later: a later submitted
	// one (a write not acknowledged that landed); Untouched: never written
	// by this run (and never submitted); Unsettled: the last write was
	// not acknowledged and the block is torn or still the old content.
	Current, Later, Untouched, Unsettled int64
	// Regressed, Torn, Foreign (another run's or no stamp where a write
	// was acknowledged), Future (a sequence never submitted), Misplaced
	// (another block's write): the errors.
	Regressed, Torn, Foreign, Future, Misplaced int64
	// Bad lists the first wrong blocks.
	Bad []BadBlock
	// RegressedBlocks lists every regressed block.
	RegressedBlocks []BadBlock
	// ReadErrors are the sweep's failed reads (their blocks unchecked).
	ReadErrors int64
	ReadErr    error `json:"-"`
	// Workload is the workload's counters at the sweep.
	Workload Stats
	// Paths are the completions per path (nil without a PathDevice).
	Paths map[string]int64
}

// Err is nil if the sweep found every block as it must be and the
// workload had no error.
func (r *Report) Err() error {
	return errors.Join(r.SweepErr(), r.Workload.Err())
}

// SweepErr is nil if the sweep read every block and found each as it
// must be, whatever errors the workload's I/O had (a write that failed is
// one the host gave up on: its block must hold the last acknowledged
// write or a later one all the same). For a host whose I/O errors are
// judged apart (the Linux host's EIO at a target's SIGKILL).
func (r *Report) SweepErr() error {
	var errs []error
	if n := r.Regressed + r.Torn + r.Foreign + r.Future + r.Misplaced; n > 0 {
		var b strings.Builder
		for _, x := range r.Bad {
			b.WriteString("\n  " + x.String())
		}
		errs = append(errs, fmt.Errorf("verify: sweep: %d regressed, %d torn, %d foreign, %d beyond the last submitted, %d misplaced blocks:%s",
			r.Regressed, r.Torn, r.Foreign, r.Future, r.Misplaced, b.String()))
	}
	if r.ReadErrors > 0 {
		errs = append(errs, fmt.Errorf("verify: sweep: %d reads failed (first: %w)", r.ReadErrors, r.ReadErr))
	}
	return errors.Join(errs...)
}

func (r *Report) String() string {
	s := fmt.Sprintf("%d blocks: %d current, %d later, %d untouched, %d unsettled; %d regressed, %d torn, %d foreign, %d future, %d misplaced; %d sweep read errors; workload: %d writes, %d reads, %d write errors, %d read errors, %d read-back errors",
		r.Blocks, r.Current, r.Later, r.Untouched, r.Unsettled, r.Regressed, r.Torn, r.Foreign, r.Future, r.Misplaced, r.ReadErrors,
		r.Workload.Writes, r.Workload.Reads, r.Workload.WriteErrors, r.Workload.ReadErrors, r.Workload.ReadBackErrors)
	if r.Paths != nil {
		keys := make([]string, 0, len(r.Paths))
		for k := range r.Paths {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s += fmt.Sprintf("; %d completions through %s", r.Paths[k], k)
		}
	}
	return s
}

const keepBad = 16

// sweepChunk is the size of one read of the sweep.
const sweepChunk = 256 << 10

// Sweep stops the workload (waiting for its I/O in flight) and reads the
// whole of dev (the device written, or another view of it, such as a new
// connection) and checks every block against what the workload recorded.
func (w *Workload) Sweep(ctx context.Context, dev Device) *Report {
	w.Stop()
	bs := int64(w.cfg.BlockSize)
	r := &Report{Blocks: dev.Size() / bs, Workload: w.Stats(), Paths: w.paths.counts()}
	chunk := sweepChunk - sweepChunk%bs
	if chunk == 0 {
		chunk = bs
	}
	buf := buffer(dev, int(chunk))
	for first := int64(0); first < r.Blocks; first += chunk / bs {
		n := min(chunk/bs, r.Blocks-first)
		p := buf[:n*bs]
		if _, err := dev.ReadAtContext(ctx, p, first*bs); err != nil && !(errors.Is(err, io.EOF) && first+n == r.Blocks) {
			r.ReadErrors++
			if r.ReadErr == nil {
				r.ReadErr = fmt.Errorf("read blocks %d..%d: %w", first, first+n-1, err)
			}
			if ctx.Err() != nil {
				return r
			}
			continue
		}
		for i := range n {
			w.check(r, first+i, p[i*bs:(i+1)*bs])
		}
	}
	return r
}

// check classifies block blk, holding b.
func (w *Workload) check(r *Report, blk int64, b []byte) {
	var acked, submitted uint64
	if j := blk - w.cfg.First; j >= 0 && j < w.cfg.Blocks {
		acked, submitted = w.acked[j], w.submitted[j]
	}
	st, kind := parse(b, w.run)
	bad := func(class int, n *int64) {
		*n++
		if len(r.Bad) < keepBad {
			r.Bad = append(r.Bad, BadBlock{Block: blk, Class: classNames[class], Found: st.seq, Acked: acked, Submitted: submitted})
		}
	}
	switch {
	case kind == kindOurs && st.block != uint64(blk):
		bad(classMisplaced, &r.Misplaced)
	case kind == kindOurs && st.seq > submitted:
		bad(classFuture, &r.Future)
	case kind == kindOurs && st.seq < acked:
		bad(classRegressed, &r.Regressed)
		r.RegressedBlocks = append(r.RegressedBlocks, BadBlock{Block: blk, Class: classNames[classRegressed], Found: st.seq, Acked: acked, Submitted: submitted})
	case kind == kindOurs && st.seq == acked:
		r.Current++
	case kind == kindOurs:
		r.Later++ // acked < seq <= submitted
	case submitted == 0 && kind == kindNotOurs:
		r.Untouched++
	case acked == submitted:
		// Every write of it acknowledged (at least one), yet it is not
		// a whole block of this run.
		if kind == kindTorn {
			bad(classTorn, &r.Torn)
		} else {
			bad(classForeign, &r.Foreign)
		}
	case kind == kindTorn:
		r.Unsettled++ // the last write was not acknowledged: not atomic
	case acked == 0:
		r.Unsettled++ // never acknowledged: the old content may be there
	default:
		// Acknowledged once, then an unacknowledged write: the block
		// must hold one of them, not a foreign content.
		bad(classForeign, &r.Foreign)
	}
}

// pathLog counts completions per path, with their times.
type pathLog struct {
	mu    sync.Mutex
	names []string
	count []int64
	log   []pathEvent
	// cond, made by a waiter, is closed by the next record.
	cond chan struct{}
}

type pathEvent struct {
	at   int64 // UnixNano
	path int32
}

func (l *pathLog) record(path string) {
	l.mu.Lock()
	at := time.Now() // under the lock: the log is in time order
	i := slices.Index(l.names, path)
	if i < 0 {
		i = len(l.names)
		l.names = append(l.names, path)
		l.count = append(l.count, 0)
	}
	l.count[i]++
	l.log = append(l.log, pathEvent{at.UnixNano(), int32(i)})
	if l.cond != nil {
		close(l.cond)
		l.cond = nil
	}
	l.mu.Unlock()
}

func (l *pathLog) counts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		return nil
	}
	m := make(map[string]int64, len(l.names))
	for i, n := range l.names {
		m[n] = l.count[i]
	}
	return m
}

// Completions returns the number of successful I/Os that completed
// through path (a PathDevice's path name).
func (w *Workload) Completions(path string) int64 {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.names, path); i >= 0 {
		return l.count[i]
	}
	return 0
}

// CompletionsSince returns the number of successful I/Os that completed
// through path at or after since.
func (w *Workload) CompletionsSince(path string, since time.Time) int {
	return w.CompletionsBetween(path, since, time.Time{})
}

// CompletionsBetween returns the number of successful I/Os that completed
// through path at or after from and before to (a zero to: no end), counted
// in one pass under the log's lock: the difference of two CompletionsSince
// calls is not, since completions land between them.
func (w *Workload) CompletionsBetween(path string, from, to time.Time) int {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.names, path)
	if i < 0 {
		return 0
	}
	n, f := 0, from.UnixNano()
	for j := len(l.log) - 1; j >= 0 && l.log[j].at >= f; j-- {
		if l.log[j].path == int32(i) && (to.IsZero() || l.log[j].at < to.UnixNano()) {
			n++
		}
	}
	return n
}

// WaitCompletions waits until n I/Os completed through path at or after
// since, or ctx ends.
func (w *Workload) WaitCompletions(ctx context.Context, path string, since time.Time, n int) error {
	l := &w.paths
	for {
		l.mu.Lock()
		if l.cond == nil {
			l.cond = make(chan struct{})
		}
		cond := l.cond
		l.mu.Unlock()
		k := w.CompletionsSince(path, since)
		if k >= n {
			return nil
		}
		select {
		case <-cond:
		case <-ctx.Done():
			st := w.Stats()
			return fmt.Errorf("verify: %d of %d completions through %s since %s: %w (workload: %d write errors, %d read errors, %d read-back errors)",
				k, n, path, since.Format("15:04:05.000"), ctx.Err(), st.WriteErrors, st.ReadErrors, st.ReadBackErrors)
		}
	}
}

// FirstCompletion returns the time of the first successful I/O that
// completed through path at or after since.
func (w *Workload) FirstCompletion(path string, since time.Time) (time.Time, bool) {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	i, t := int32(slices.Index(l.names, path)), since.UnixNano()
	for _, e := range l.log {
		if e.path == i && e.at >= t {
			return time.Unix(0, e.at), true
		}
	}
	return time.Time{}, false
}

// LastCompletion returns the time of the last successful I/O that
// completed through path.
func (w *Workload) LastCompletion(path string) (time.Time, bool) {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	i := int32(slices.Index(l.names, path))
	for j := len(l.log) - 1; j >= 0; j-- {
		if l.log[j].path == i {
			return time.Unix(0, l.log[j].at), true
		}
	}
	return time.Time{}, false
}

// Stall is the time from the last completion through from before since to
// the first completion through another path at or after since: the time
// the host's I/O stood still while it moved away from from.
func (w *Workload) Stall(from string, since time.Time) (time.Duration, error) {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	i := int32(slices.Index(l.names, from))
	t := since.UnixNano()
	first := -1
	for j, e := range l.log {
		if e.path != i && e.at >= t {
			first = j
			break
		}
	}
	if first < 0 {
		return 0, fmt.Errorf("verify: no completion through another path than %s since %s", from, since.Format("15:04:05.000"))
	}
	for j := first - 1; j >= 0; j-- {
		if l.log[j].path == i {
			return time.Duration(l.log[first].at - l.log[j].at), nil
		}
	}
	return 0, fmt.Errorf("verify: no completion through %s before the first through another path", from)
}

// File adapts a block device or file of the Linux host (opened for reading
// and writing, O_DIRECT if wanted: then the buffers are not aligned, so
// use a plain open unless the caller aligns) as a Device.
func File(f *os.File) (Device, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("verify: size of %s: %w", f.Name(), err)
	}
	return &file{f: f, size: size}, nil
}

type file struct {
	f    *os.File
	size int64
}

func (f *file) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *file) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *file) Size() int64 { return f.size }
