package backend

// NullOptions configures [OpenNull].
type NullOptions struct {
	Size      int64  // capacity in bytes; a positive multiple of BlockSize
	BlockSize uint32 // 512 (default when 0) or 4096
	ReadOnly  bool   // writes fail with ErrReadOnly

	// Pattern is what reads return, repeated from byte offset 0 of the
	// backend; empty means zeroes. At most 4096 bytes.
	Pattern []byte

	// NoFill leaves read buffers untouched instead of filling them, like
	// Linux null_blk. Only for measuring the transport: reads then return
	// whatever the buffer held.
	NoFill bool
}

// Null is a backend that discards writes and reads back zeroes (or a fixed
// pattern). It keeps no data, so it costs nothing but the range checks and
// the fill of read buffers; it exists for benchmarks. With a Pattern (or
// NoFill), reads return the pattern even after WriteZeroes: the null
// backend does not keep the zeroes guarantee of [Backend] then.
type Null struct {
	ram
	noFill  bool
	plen    int    // len(Pattern), 0 for zeroes
	pattern []byte // Pattern repeated to at least 64 KiB plus plen bytes
}

var _ Backend = (*Null)(nil)

// OpenNull returns a null backend.
func OpenNull(opts NullOptions) (*Null, error) {
	n := &Null{noFill: opts.NoFill}
	if err := n.init(opts.Size, opts.BlockSize, opts.ReadOnly); err != nil {
		return nil, err
	}
	if len(opts.Pattern) > maxPattern {
		return nil, cfgErr("pattern", "%d bytes is longer than the limit of %d", len(opts.Pattern), maxPattern)
	}
	if !isZero(opts.Pattern) {
		n.plen = len(opts.Pattern)
		reps := (64<<10)/n.plen + 2
		n.pattern = make([]byte, 0, reps*n.plen)
		for range reps {
			n.pattern = append(n.pattern, opts.Pattern...)
		}
	}
	return n, nil
}

func isZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// ReadAt fills p with zeroes or the pattern. See [Backend].
func (n *Null) ReadAt(p []byte, off int64) error {
	if err := n.checkRead(off, int64(len(p))); err != nil {
		return err
	}
	switch {
	case n.noFill:
	case n.plen == 0:
		clear(p)
	default:
		// n.pattern holds the pattern repeated, with plen bytes of slack so
		// that any phase can start a full-length copy.
		max := len(n.pattern) - n.plen
		for len(p) > 0 {
			phase := int(off % int64(n.plen))
			c := copy(p[:min(len(p), max)], n.pattern[phase:])
			p = p[c:]
			off += int64(c)
		}
	}
	return nil
}

// WriteAt discards p. See [Backend].
func (n *Null) WriteAt(p []byte, off int64, fua bool) error {
	return n.check(OpWrite, off, int64(len(p)))
}

// WriteZeroes does nothing. See [Backend].
func (n *Null) WriteZeroes(off, length int64, deallocate bool) error {
	return n.check(OpWriteZeroes, off, length)
}

// Discard does nothing. See [Backend].
func (n *Null) Discard(off, length int64) error {
	return n.check(OpDiscard, off, length)
}

// Info describes the null backend. Reads of discarded or zeroed ranges
// return the pattern, so DiscardZeroes is true only without one.
func (n *Null) Info() Info {
	return Info{
		Kind: KindNull, Size: n.size, BlockSize: n.bs, PhysicalBlockSize: n.bs,
		BufferAlign: 1, ReadOnly: n.ro,
		Discard: true, DiscardZeroes: n.plen == 0 && !n.noFill, WriteZeroesOffload: true,
	}
}

// Health reports that a null backend has no device health.
func (n *Null) Health() (Health, error) {
	return Health{Reason: "null backend: no device-reported health"}, nil
}

// Close marks the backend closed.
func (n *Null) Close() error {
	n.closed.Store(true)
	return nil
}
