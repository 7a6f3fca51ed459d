// Package relay is a re-segmenting TCP middlebox for tests (test support
// only: no product package may import it). Between a host and a target it
// terminates each TCP connection and opens its own to the target, then
// copies each direction's byte stream with the segment boundaries
// rewritten: it coalesces what arrives (reads more for a bounded while
// before sending) and splits what it sends into writes of random sizes,
// each one its own segment (TCP_NODELAY), with random bounded delays
// between them. The bytes and their order are untouched: what a correct
// TCP peer may see from a middlebox that re-segments (a proxy, a WAN
// optimiser, a NAT that rewrites, QEMU's slirp). An iWARP peer must then
// find its FPDUs in a stream whose segments no longer align to them (RFC
// 5044 §4: MPA's framing does not depend on segment boundaries when
// markers are off; the receiver must reassemble), an NVMe/TCP peer its PDUs
// split across segments and several PDUs in one segment.
//
// Every resource is capped: MaxConns connections, one fixed buffer per
// direction, every delay bounded. Close stops the listener and every
// connection and waits for its goroutines.
package relay

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config is the relay's shape. The zero value of a field means its
// default.
type Config struct {
	// Target is the address the relay connects each accepted connection
	// to (host:port). Required.
	Target string
	// Listen is the address the relay listens on (default 127.0.0.1:0).
	Listen string
	// MinWrite and MaxWrite bound the size of each write (segment) the
	// relay sends (default 1 and 9000 bytes).
	MinWrite, MaxWrite int
	// Coalesce bounds how long the relay keeps reading to join what
	// arrives into a larger chunk before it sends (default 2 ms; negative:
	// send what one read returned).
	Coalesce time.Duration
	// MaxDelay bounds the random pause before each write (default 0: no
	// pause). Pauses of a direction add up: keep it small against the
	// peers' timeouts.
	MaxDelay time.Duration
	// Buffer is the size of each direction's buffer: the largest chunk
	// coalesced (default 256 KiB).
	Buffer int
	// MaxConns caps the connections relayed at once (default 64); more are
	// closed on accept.
	MaxConns int
	// Seed seeds the random sizes and delays (default: random). Each
	// direction of each connection draws from its own generator.
	Seed uint64
}

func (c *Config) withDefaults() (Config, error) {
	d := *c
	if d.Target == "" {
		return d, errors.New("relay: no target address")
	}
	if d.Listen == "" {
		d.Listen = "127.0.0.1:0"
	}
	if d.MinWrite <= 0 {
		d.MinWrite = 1
	}
	if d.MaxWrite <= 0 {
		d.MaxWrite = 9000
	}
	if d.MaxWrite < d.MinWrite {
		return d, fmt.Errorf("relay: max write %d below min write %d", d.MaxWrite, d.MinWrite)
	}
	if d.Coalesce == 0 {
		d.Coalesce = 2 * time.Millisecond
	}
	if d.MaxDelay < 0 {
		return d, fmt.Errorf("relay: negative max delay %v", d.MaxDelay)
	}
	if d.Buffer <= 0 {
		d.Buffer = 256 << 10
	}
	if d.MaxConns <= 0 {
		d.MaxConns = 64
	}
	if d.Seed == 0 {
		d.Seed = rand.Uint64()
	}
	return d, nil
}

// Stats counts what the relay did.
type Stats struct {
	// Conns is the number of connections relayed (accepted and connected
	// to the target); Refused those closed at the cap or because the
	// target could not be reached.
	Conns, Refused int64
	// Bytes is the number of bytes relayed (both directions); Writes the
	// number of writes (segments sent); Reads the number of reads.
	Bytes, Writes, Reads int64
	// Split counts reads whose bytes went out in more than one write;
	// Joined counts writes that carried bytes of more than one read.
	Split, Joined int64
}

// Relay is a running relay.
type Relay struct {
	cfg Config
	ln  net.Listener
	wg  sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	seq    uint64

	conns64, refused, bytes, writes, reads, split, joined atomic.Int64
}

// Start listens and relays until Close.
func Start(cfg Config) (*Relay, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("relay: listen %s: %w", c.Listen, err)
	}
	r := &Relay{cfg: c, ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address the relay listens on.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Seed is the seed the relay draws from (to reproduce a run).
func (r *Relay) Seed() uint64 { return r.cfg.Seed }

// Stats returns the counts so far.
func (r *Relay) Stats() Stats {
	return Stats{Conns: r.conns64.Load(), Refused: r.refused.Load(), Bytes: r.bytes.Load(), Writes: r.writes.Load(),
		Reads: r.reads.Load(), Split: r.split.Load(), Joined: r.joined.Load()}
}

// Cut closes every relayed connection (both sides at once, as a middlebox
// that loses its state) and keeps listening.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		_ = c.Close()
	}
}

// Close stops listening, closes every connection and waits for the
// relay's goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.ln.Close()
	r.Cut()
	r.wg.Wait()
	return err
}

func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
		_ = c.Close()
	}
}

func (r *Relay) accept() {
	defer r.wg.Done()
	active := make(chan struct{}, r.cfg.MaxConns)
	for {
		c, err := r.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		select {
		case active <- struct{}{}:
		default:
			r.refused.Add(1)
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.seq++
		seed := r.cfg.Seed + r.seq*0x9E3779B97F4A7C15
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-active }()
			r.serve(c.(*net.TCPConn), seed)
		}()
	}
}

func (r *Relay) serve(down *net.TCPConn, seed uint64) {
	if !r.track(down) {
		_ = down.Close()
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	uc, err := d.Dial("tcp", r.cfg.Target)
	if err != nil {
		r.refused.Add(1)
		r.untrack(down)
		return
	}
	up := uc.(*net.TCPConn)
	if !r.track(up) {
		r.untrack(down, up)
		return
	}
	r.conns64.Add(1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pump(up, down, rand.New(rand.NewPCG(seed, 1))) }()
	go func() { defer wg.Done(); r.pump(down, up, rand.New(rand.NewPCG(seed, 2))) }()
	wg.Wait()
	r.untrack(down, up)
}

// pump copies src to dst, re-segmented. At src's end (FIN) it half-closes
// dst; on any error it closes both, so the other direction ends too.
func (r *Relay) pump(dst, src *net.TCPConn, rng *rand.Rand) {
	_ = dst.SetNoDelay(true) // each write its own segment
	buf := make([]byte, r.cfg.Buffer)
	fail := func() { _ = dst.Close(); _ = src.Close() }
	for {
		// Coalesce: the first read waits as long as it must; more reads
		// join it until the chunk's random size is reached or Coalesce
		// passes.
		want := r.cfg.MinWrite + rng.IntN(len(buf)-r.cfg.MinWrite+1)
		if want > len(buf) {
			want = len(buf)
		}
		_ = src.SetReadDeadline(time.Time{})
		n, err := src.Read(buf[:want])
		r.reads.Add(1)
		eof := false
		reads := 1
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fail()
				return
			}
			eof = true
		}
		if r.cfg.Coalesce > 0 && !eof {
			deadline := time.Now().Add(time.Duration(rng.Int64N(int64(r.cfg.Coalesce)) + 1))
			for n < want {
				_ = src.SetReadDeadline(deadline)
				m, err := src.Read(buf[n:want])
				n += m
				if m > 0 {
					r.reads.Add(1)
					reads++
				}
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						break
					}
					if errors.Is(err, io.EOF) {
						eof = true
						break
					}
					fail()
					return
				}
			}
		}
		if reads > 1 {
			r.joined.Add(1)
		}
		// Split: random write sizes, each after a random bounded pause.
		chunk := buf[:n]
		for k := 0; len(chunk) > 0; k++ {
			if k == 1 {
				r.split.Add(1)
			}
			w := r.cfg.MinWrite + rng.IntN(r.cfg.MaxWrite-r.cfg.MinWrite+1)
			w = min(w, len(chunk))
			if r.cfg.MaxDelay > 0 {
				time.Sleep(time.Duration(rng.Int64N(int64(r.cfg.MaxDelay) + 1)))
			}
			if _, err := dst.Write(chunk[:w]); err != nil {
				fail()
				return
			}
			r.writes.Add(1)
			r.bytes.Add(int64(w))
			chunk = chunk[w:]
		}
		if eof {
			_ = dst.CloseWrite()
			return
		}
	}
}
