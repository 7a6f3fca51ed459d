// Package bench is the host tool's load generator (nvmeof bench, and the
// connection daemon's bench operation): fio's patterns (read, write,
// randread, randwrite, rw, randrw) at a queue depth over an
// initiator.Head, with latency histograms, CPU time and, with Verify, a
// per-block pattern written and checked on every read (a prefill, or a
// read-back at the end of a write-only load). Its I/O path allocates
// nothing per I/O: each slot reuses its request and buffer.
package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/perfcount"
)

// Params describe a load (fio's names).
type Params struct {
	NSID      uint32        `json:"nsid"`
	RW        string        `json:"rw"`        // read, write, randread, randwrite, rw, randrw
	BS        int           `json:"bs"`        // bytes per I/O
	IODepth   int           `json:"iodepth"`   // I/Os in flight
	RWMixRead int           `json:"rwmixread"` // percent of reads in rw/randrw
	Runtime   time.Duration `json:"runtime"`
	Offset    int64         `json:"offset"` // start of the region used
	Size      int64         `json:"size"`   // length of the region (0: to the end)
	Verify    bool          `json:"verify"` // write a per-block pattern and check it on reads
	Seed      uint64        `json:"seed"`
	// Prefilled says the region already holds the pattern of Seed (from a
	// PrefillOnly run): reads verify it without writing it first.
	Prefilled bool `json:"prefilled,omitempty"`
	// PrefillOnly writes the pattern of Seed over the region in pieces
	// of BS and stops.
	PrefillOnly bool `json:"prefill_only,omitempty"`
	// Force runs on a namespace that is in use (mounted, on a loop
	// device, its file open).
	Force bool `json:"force,omitempty"`
}

// Writes says whether the load writes to the namespace: a write or mixed
// pattern, a prefill, or a verified read load that writes its pattern
// first. A load that only reads runs on a namespace in use (mounted) without
// --force: it cannot harm the filesystem (issue 23.14).
func (p *Params) Writes() bool {
	return p.PrefillOnly || (p.RW != "read" && p.RW != "randread") || (p.Verify && !p.Prefilled)
}

// MarshalJSON writes Runtime as a Go duration string ("10s").
func (p Params) MarshalJSON() ([]byte, error) {
	type plain Params
	return json.Marshal(struct {
		plain
		Runtime string `json:"runtime"`
	}{plain(p), p.Runtime.String()})
}

// UnmarshalJSON reads Runtime as a Go duration string.
func (p *Params) UnmarshalJSON(b []byte) error {
	type plain Params
	var x struct {
		*plain
		Runtime string `json:"runtime"`
	}
	x.plain = (*plain)(p)
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	d, err := time.ParseDuration(x.Runtime)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	p.Runtime = d
	return nil
}

// OpStats are the figures of one direction.
type OpStats struct {
	IOs     uint64  `json:"ios"`
	Bytes   uint64  `json:"bytes"`
	IOPS    float64 `json:"iops"`
	MiBps   float64 `json:"mib_per_s"`
	LatMean float64 `json:"lat_mean_us"`
	LatMin  float64 `json:"lat_min_us"`
	LatP50  float64 `json:"lat_p50_us"`
	LatP99  float64 `json:"lat_p99_us"`
	LatP999 float64 `json:"lat_p99_9_us"`
	LatMax  float64 `json:"lat_max_us"`
}

// Result is what a load measured.
type Result struct {
	Params       Params   `json:"params"`
	Target       string   `json:"target"`
	Queues       int      `json:"io_queues"`
	CRC          bool     `json:"mpa_crc"`
	QueueSize    int      `json:"queue_size"`
	Elapsed      float64  `json:"elapsed_s"`
	Read         *OpStats `json:"read,omitempty"`
	Write        *OpStats `json:"write,omitempty"`
	Total        OpStats  `json:"total"`
	CPUUser      float64  `json:"cpu_user_s"`
	CPUSys       float64  `json:"cpu_sys_s"`
	CPUPercent   float64  `json:"cpu_percent"` // (user+sys)/elapsed, 100 = one core
	Errors       uint64   `json:"errors"`
	FirstError   string   `json:"first_error,omitempty"`
	Verified     uint64   `json:"verified_blocks"`
	VerifyErrors uint64   `json:"verify_errors"`
}

// benchIO is one I/O slot of the load: its request and buffer, reused.
type benchIO struct {
	r     initiator.Request
	buf   []byte
	rng   rand.PCG
	start int64
	b     *bench
}

type bench struct {
	ns      *initiator.Head
	p       Params
	bs      int64 // namespace block size
	unit    int64 // verification unit: the namespace block
	start   time.Time
	stop    atomic.Bool
	seqNext atomic.Int64
	active  sync.WaitGroup
	retry   chan *benchIO
	rd, wr  hist
	rdBytes atomic.Uint64
	wrBytes atomic.Uint64
	errs    atomic.Uint64
	errMu   sync.Mutex
	err1    error
	checked atomic.Uint64
	bad     atomic.Uint64
	written []atomic.Uint64 // verify: bitmap of units written
	random  bool
	mix     int // percent reads
}

func (b *bench) now() int64 { return int64(time.Since(b.start)) }

// pattern fills p (the data of the units starting at byte offset off) with
// the per-block verification pattern: each unit starts with its byte
// offset and the seed, then a pseudo-random stream keyed by both.
func (b *bench) pattern(p []byte, off int64) {
	for u := int64(0); u < int64(len(p)); u += b.unit {
		blk := p[u : u+b.unit]
		o := uint64(off + u)
		binary.LittleEndian.PutUint64(blk[0:], o)
		binary.LittleEndian.PutUint64(blk[8:], b.p.Seed)
		x := o*0x9E3779B97F4A7C15 ^ b.p.Seed
		for i := 16; i+8 <= len(blk); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(blk[i:], x)
		}
	}
}

// check verifies read data against the pattern; units never written (in a
// write-only verification) are skipped.
func (b *bench) check(p []byte, off int64) {
	for u := int64(0); u < int64(len(p)); u += b.unit {
		o := off + u
		if b.written != nil {
			k := (o - b.p.Offset) / b.unit
			if b.written[k/64].Load()&(1<<(k%64)) == 0 {
				continue
			}
		}
		blk := p[u : u+b.unit]
		ok := binary.LittleEndian.Uint64(blk[0:]) == uint64(o) && binary.LittleEndian.Uint64(blk[8:]) == b.p.Seed
		if ok {
			x := uint64(o)*0x9E3779B97F4A7C15 ^ b.p.Seed
			for i := 16; i+8 <= len(blk); i += 8 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				if binary.LittleEndian.Uint64(blk[i:]) != x {
					ok = false
					break
				}
			}
		}
		b.checked.Add(1)
		if !ok {
			if b.bad.Add(1) == 1 {
				b.noteErr(fmt.Errorf("verify: block at byte %d holds %d/%#x, want its own pattern", o,
					binary.LittleEndian.Uint64(blk[0:]), binary.LittleEndian.Uint64(blk[8:])))
			}
		}
	}
}

func (b *bench) markWritten(off int64, n int) {
	if b.written == nil {
		return
	}
	for u := int64(0); u < int64(n); u += b.unit {
		k := (off + u - b.p.Offset) / b.unit
		b.written[k/64].Or(1 << (k % 64))
	}
}

func (b *bench) noteErr(err error) {
	b.errMu.Lock()
	if b.err1 == nil {
		b.err1 = err
	}
	b.errMu.Unlock()
}

// next sets up io's next request.
func (b *bench) next(io *benchIO) {
	r := &io.r
	write := false
	switch b.p.RW {
	case "write", "randwrite":
		write = true
	case "rw", "randrw":
		write = int(io.rng.Uint64()%100) >= b.mix
	}
	n := b.p.Size / int64(b.p.BS)
	var k int64
	if b.random {
		k = int64(io.rng.Uint64() % uint64(n))
	} else {
		k = (b.seqNext.Add(1) - 1) % n
	}
	r.Offset = b.p.Offset + k*int64(b.p.BS)
	r.Op = initiator.OpRead
	if write {
		r.Op = initiator.OpWrite
		if b.p.Verify {
			b.pattern(io.buf, r.Offset)
		}
	}
	io.start = b.now()
}

// done is io's Request.Done (a method value bound once, when io is made).
func (io *benchIO) done(r *initiator.Request) { io.b.done(io, r) }

// done is a completion: record it and start the next I/O right here on the
// initiator's goroutine (TrySubmit never waits), as spdk_nvme_perf does
// from its completion callback.
func (b *bench) done(io *benchIO, r *initiator.Request) {
	lat := uint64(b.now() - io.start)
	if r.Err != nil {
		if b.errs.Add(1) == 1 {
			b.noteErr(r.Err)
		}
	} else if r.Op == initiator.OpRead {
		b.rd.record(lat)
		b.rdBytes.Add(uint64(len(r.Data)))
		if b.p.Verify {
			b.check(r.Data, r.Offset)
		}
	} else {
		b.wr.record(lat)
		b.wrBytes.Add(uint64(len(r.Data)))
		b.markWritten(r.Offset, len(r.Data))
	}
	if b.stop.Load() || (r.Err != nil && (errors.Is(r.Err, initiator.ErrControllerLost) || errors.Is(r.Err, initiator.ErrNoPath))) {
		b.active.Done()
		return
	}
	b.next(io)
	if err := b.ns.TrySubmit(&io.r); err != nil {
		b.retry <- io // a slot is busy elsewhere: submit from a goroutine
	}
}

// Run runs the load p on ns and reports each second through
// progress.
func Run(ctx context.Context, ns *initiator.Head, p Params, progress func(string)) (*Result, error) {
	bs := int64(ns.BlockSize())
	if p.BS <= 0 || int64(p.BS)%bs != 0 {
		return nil, fmt.Errorf("bs %d is not a multiple of the %d-byte block", p.BS, bs)
	}
	if p.BS > ns.MaxTransferSize() {
		return nil, fmt.Errorf("bs %d is larger than the controller's maximum transfer (%d)", p.BS, ns.MaxTransferSize())
	}
	if p.IODepth <= 0 {
		p.IODepth = 1
	}
	if p.Offset < 0 || p.Offset%bs != 0 || p.Offset >= ns.Size() {
		return nil, fmt.Errorf("offset %d out of the namespace or not block aligned", p.Offset)
	}
	if p.Size == 0 || p.Offset+p.Size > ns.Size() {
		p.Size = ns.Size() - p.Offset
	}
	p.Size -= p.Size % int64(p.BS)
	if p.Size < int64(p.BS) {
		return nil, fmt.Errorf("region of %d bytes is smaller than bs", p.Size)
	}
	if p.Runtime <= 0 {
		p.Runtime = 10 * time.Second
	}
	if p.RWMixRead < 0 || p.RWMixRead > 100 {
		return nil, fmt.Errorf("rwmixread %d not in 0..100", p.RWMixRead)
	}
	if p.Seed == 0 && (p.PrefillOnly || p.Prefilled) {
		return nil, errors.New("prefill-only and prefilled need --seed")
	}
	if p.Seed == 0 {
		p.Seed = uint64(time.Now().UnixNano())
	}
	b := &bench{ns: ns, p: p, bs: bs, unit: bs, mix: p.RWMixRead, retry: make(chan *benchIO, p.IODepth)}
	switch p.RW {
	case "read", "write", "rw":
	case "randread", "randwrite", "randrw":
		b.random = true
	default:
		return nil, fmt.Errorf("unknown rw %q (read, write, randread, randwrite, rw, randrw)", p.RW)
	}
	switch p.RW {
	case "read", "randread":
		b.mix = 100
	case "write", "randwrite":
		b.mix = 0
	}
	if p.Verify && b.unit < 16 {
		return nil, errors.New("verify needs blocks of at least 16 bytes")
	}
	if p.Verify && b.mix == 0 {
		b.written = make([]atomic.Uint64, (p.Size/b.unit+63)/64)
	}
	if p.PrefillOnly {
		start := time.Now()
		if err := overRegion(ctx, ns, b, func(buf []byte, off int64) error {
			b.pattern(buf, off)
			_, err := ns.WriteAtContext(ctx, buf, off)
			return err
		}); err != nil {
			return nil, err
		}
		el := time.Since(start)
		_, _, crc := queueInfo(ns)
		return &Result{Params: p, Target: pathsOf(ns), Elapsed: el.Seconds(), CRC: crc,
			Total: OpStats{IOs: uint64(p.Size / int64(p.BS)), Bytes: uint64(p.Size), MiBps: float64(p.Size) / el.Seconds() / (1 << 20)}}, nil
	}
	if p.Verify && b.mix > 0 && !p.Prefilled {
		// Reads check the pattern: write it over the region first.
		if progress != nil {
			progress(fmt.Sprintf("verify: writing the pattern over %s at offset %d", HumanSize(p.Size), p.Offset))
		}
		if err := prefill(ctx, ns, b); err != nil {
			return nil, err
		}
	}
	ios := make([]*benchIO, p.IODepth)
	for i := range ios {
		io := &benchIO{buf: make([]byte, p.BS), b: b}
		io.rng.Seed(p.Seed, uint64(i)+1)
		io.r.Data = io.buf
		io.r.Done = io.done
		ios[i] = io
	}
	var ru0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	perfcount.Begin()
	b.start = time.Now()
	helperDone := make(chan struct{})
	go func() { // submits what TrySubmit could not
		defer close(helperDone)
		for io := range b.retry {
			if err := ns.Submit(ctx, &io.r); err != nil {
				io.r.Err = err
				b.done(io, &io.r)
			}
		}
	}()
	b.active.Add(len(ios))
	for _, io := range ios {
		b.next(io)
		if err := ns.Submit(ctx, &io.r); err != nil {
			b.stop.Store(true)
			b.active.Done()
			b.noteErr(err)
		}
	}
	// Progress each second, until the runtime is over.
	tick := time.NewTicker(time.Second)
	end := time.NewTimer(p.Runtime)
	var lastR, lastW, lastRB, lastWB uint64
	var lastT time.Duration
loop:
	for {
		select {
		case <-tick.C:
			el := time.Since(b.start)
			r, w := b.rd.count(), b.wr.count()
			rb, wb := b.rdBytes.Load(), b.wrBytes.Load()
			dt := (el - lastT).Seconds()
			if progress != nil {
				progress(fmt.Sprintf("[%4.0fs] %8.0f IOPS %9.1f MiB/s  (read %.0f, write %.0f IOPS)  errors %d",
					el.Seconds(), float64(r+w-lastR-lastW)/dt, float64(rb+wb-lastRB-lastWB)/dt/(1<<20),
					float64(r-lastR)/dt, float64(w-lastW)/dt, b.errs.Load()))
			}
			lastR, lastW, lastRB, lastWB, lastT = r, w, rb, wb, el
		case <-end.C:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	tick.Stop()
	b.stop.Store(true)
	b.active.Wait()
	elapsed := time.Since(b.start)
	perfcount.End(b.rd.count() + b.wr.count())
	close(b.retry)
	<-helperDone
	var ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	if b.written != nil {
		// Write-only verification: read back what was written.
		if progress != nil {
			progress("verify: reading back the written blocks")
		}
		if err := readBack(ctx, ns, b); err != nil {
			b.noteErr(err)
		}
	}
	nq, qs, crc := queueInfo(ns)
	res := &Result{Params: p, Target: pathsOf(ns), Queues: nq, QueueSize: qs, CRC: crc, Elapsed: elapsed.Seconds(),
		Errors: b.errs.Load(), Verified: b.checked.Load(), VerifyErrors: b.bad.Load()}
	res.CPUUser = tv(ru1.Utime) - tv(ru0.Utime)
	res.CPUSys = tv(ru1.Stime) - tv(ru0.Stime)
	res.CPUPercent = 100 * (res.CPUUser + res.CPUSys) / res.Elapsed
	if b.mix > 0 {
		res.Read = stats(&b.rd, b.rdBytes.Load(), elapsed)
	}
	if b.mix < 100 {
		res.Write = stats(&b.wr, b.wrBytes.Load(), elapsed)
	}
	var all hist
	for i := range all.counts {
		all.counts[i].Store(b.rd.counts[i].Load() + b.wr.counts[i].Load())
	}
	all.n.Store(b.rd.n.Load() + b.wr.n.Load())
	all.sum.Store(b.rd.sum.Load() + b.wr.sum.Load())
	all.max.Store(max(b.rd.max.Load(), b.wr.max.Load()))
	switch {
	case b.rd.min.Load() == 0:
		all.min.Store(b.wr.min.Load())
	case b.wr.min.Load() == 0:
		all.min.Store(b.rd.min.Load())
	default:
		all.min.Store(min(b.rd.min.Load(), b.wr.min.Load()))
	}
	res.Total = *stats(&all, b.rdBytes.Load()+b.wrBytes.Load(), elapsed)
	if b.err1 != nil {
		res.FirstError = b.err1.Error()
	}
	return res, nil
}

func tv(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func stats(h *hist, bytes uint64, el time.Duration) *OpStats {
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	return &OpStats{
		IOs: h.count(), Bytes: bytes, IOPS: float64(h.count()) / el.Seconds(), MiBps: float64(bytes) / el.Seconds() / (1 << 20),
		LatMean: h.mean() / 1e3, LatMin: us(h.minimum()), LatP50: us(h.percentile(50)), LatP99: us(h.percentile(99)),
		LatP999: us(h.percentile(99.9)), LatMax: us(h.max.Load()),
	}
}

// prefill writes the verification pattern over the region at the load's
// queue depth.
func prefill(ctx context.Context, ns *initiator.Head, b *bench) error {
	return overRegion(ctx, ns, b, func(buf []byte, off int64) error {
		b.pattern(buf, off)
		_, err := ns.WriteAtContext(ctx, buf, off)
		return err
	})
}

// readBack reads the region and checks the blocks written.
func readBack(ctx context.Context, ns *initiator.Head, b *bench) error {
	return overRegion(ctx, ns, b, func(buf []byte, off int64) error {
		if _, err := ns.ReadAtContext(ctx, buf, off); err != nil {
			return err
		}
		b.check(buf, off)
		return nil
	})
}

// overRegion runs f over the region in pieces of up to 1 MiB from
// IODepth goroutines.
func overRegion(ctx context.Context, ns *initiator.Head, b *bench, f func([]byte, int64) error) error {
	piece := int64(min(ns.MaxTransferSize(), 1<<20))
	piece -= piece % int64(b.p.BS)
	if b.p.PrefillOnly {
		piece = int64(b.p.BS)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, b.p.IODepth)
	for w := 0; w < min(b.p.IODepth, 32); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, piece)
			for {
				off := next.Add(piece) - piece
				if off >= b.p.Size {
					return
				}
				n := min(piece, b.p.Size-off)
				if err := f(buf[:n], b.p.Offset+off); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// Report prints the summary in the manner of fio.
func Report(w io.Writer, r *Result) {
	line := func(name string, s *OpStats) {
		fmt.Fprintf(w, "  %s: IOPS=%.0f, BW=%.1fMiB/s (%.1fMB/s), %d I/Os in %.2fs\n", name, s.IOPS, s.MiBps,
			float64(s.Bytes)/r.Elapsed/1e6, s.IOs, r.Elapsed)
		fmt.Fprintf(w, "    lat (usec): min=%.1f, mean=%.1f, p50=%.1f, p99=%.1f, p99.9=%.1f, max=%.1f\n",
			s.LatMin, s.LatMean, s.LatP50, s.LatP99, s.LatP999, s.LatMax)
	}
	crc := "off"
	if r.CRC {
		crc = "on"
	}
	fmt.Fprintf(w, "%s: %d I/O queues of %d, MPA CRC %s\n", r.Target, r.Queues, r.QueueSize, crc)
	if r.Read != nil {
		line("read", r.Read)
	}
	if r.Write != nil {
		line("write", r.Write)
	}
	fmt.Fprintf(w, "  cpu: user=%.2fs sys=%.2fs (%.0f%% of one core; this process only)\n", r.CPUUser, r.CPUSys, r.CPUPercent)
	if r.Params.Verify {
		fmt.Fprintf(w, "  verify: %d blocks checked, %d bad\n", r.Verified, r.VerifyErrors)
	}
	if r.Errors > 0 || r.FirstError != "" {
		fmt.Fprintf(w, "  errors: %d (first: %s)\n", r.Errors, r.FirstError)
	}
}

// queueInfo is what the Report says of the queues: those of ns's first
// path (the load may use every path).
func queueInfo(ns *initiator.Head) (nq, qs int, crc bool) {
	if ps := ns.Subsystem().Paths(); len(ps) > 0 {
		nq, qs = ps[0].Controller().QueueCount()
		crc = ps[0].Controller().CRC()
	}
	return nq, qs, crc
}

// pathsOf names the addresses of ns's paths.
func pathsOf(ns *initiator.Head) string {
	var a []string
	for _, p := range ns.Subsystem().Paths() {
		a = append(a, p.Address())
	}
	return strings.Join(a, ",")
}

// HumanSize is n bytes in binary units, as list and bench print a size
// ("8 MiB", "1.5 GiB").
func HumanSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + units[i]
}
