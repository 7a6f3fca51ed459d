package wiretrace

import "sync"

// Pending is a tap set on a connection before it is known whether a trace
// selects it: a trace by host NQN learns the host from the Fabrics Connect
// capsule, which has crossed the wire by then. Pending keeps the bytes
// each way, in order, up to a bound; Attach then writes them into a
// trace's Conn and forwards everything after them, so the trace has the
// connection from its first FPDU on, Connect included (issue 23.11).
// Discard drops them. It is an iwarp.Tap (TapRx, TapTx).
type Pending struct {
	mu     sync.Mutex
	max    int // bytes kept in all
	n      int
	over   bool
	chunks []pendingChunk
	to     *Conn // after Attach
	done   bool  // Discard, or Attach after an overflow
}

type pendingChunk struct {
	rx   bool
	data []byte
}

// NewPending returns a Pending that keeps at most max bytes in all.
func NewPending(max int) *Pending { return &Pending{max: max} }

// TapRx records (or, attached, forwards) what one read brought.
func (p *Pending) TapRx(a, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.to != nil {
		p.to.TapRx(a, b)
		return
	}
	p.keep(true, a)
	p.keep(false, nil)
	p.keep(true, b)
}

// TapTx records (or, attached, forwards) what one write sent.
func (p *Pending) TapTx(iov [][]byte, off, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.to != nil {
		p.to.TapTx(iov, off, n)
		return
	}
	for _, b := range iov {
		if n == 0 {
			break
		}
		if off > 0 {
			k := min(off, len(b))
			b, off = b[k:], off-k
		}
		k := min(len(b), n)
		p.keep(false, b[:k])
		n -= k
	}
}

// keep appends b to the record (a nil b from TapRx's middle is a no-op).
func (p *Pending) keep(rx bool, b []byte) {
	if len(b) == 0 || p.done || p.over {
		return
	}
	if p.n+len(b) > p.max {
		p.over, p.chunks = true, nil
		return
	}
	p.n += len(b)
	if k := len(p.chunks); k > 0 && p.chunks[k-1].rx == rx {
		p.chunks[k-1].data = append(p.chunks[k-1].data, b...)
		return
	}
	p.chunks = append(p.chunks, pendingChunk{rx: rx, data: append([]byte(nil), b...)})
}

// Attach writes the kept bytes into c and forwards what follows. It
// reports false, and forwards nothing, if more than the bound crossed the
// connection before (the trace would not start at an FPDU boundary).
func (p *Pending) Attach(c *Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over || p.done {
		p.done, p.chunks = true, nil
		return false
	}
	for _, ch := range p.chunks {
		if ch.rx {
			c.TapRx(ch.data, nil)
		} else {
			c.TapTx([][]byte{ch.data}, 0, len(ch.data))
		}
	}
	p.chunks, p.to = nil, c
	return true
}

// Discard drops the kept bytes and keeps nothing more.
func (p *Pending) Discard() {
	p.mu.Lock()
	p.done, p.chunks = true, nil
	p.mu.Unlock()
}
