// Package wiretrace writes wire traces of iWARP connections as classic
// pcap files (LINKTYPE_RAW: IPv4 or IPv6, TCP) that Wireshark and tshark
// dissect as iWARP MPA, DDP and RDMAP. The bytes come from the QPs
// themselves (iwarp.Tap), not from a packet socket: no privileges, no
// kernel filter, and only the traced connections pay for it. TCP segments
// are synthesized around what each read and write carried; each traced
// connection starts with a synthesized handshake and MPA Request/Reply (the
// negotiated parameters and private data), because a dissector follows
// FPDUs only after it has seen them.
//
// A trace is bounded: it stops itself when its file reaches MaxBytes or
// after Duration, whichever comes first.
package wiretrace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"sync"
	"time"
)

// Limits bound a trace.
type Limits struct {
	MaxBytes int64         // size of the pcap file (> 0)
	Duration time.Duration // how long it runs (> 0)
}

// Trace is one pcap file being written.
type Trace struct {
	mu       sync.Mutex
	f        io.WriteCloser
	w        *bufio.Writer
	lim      Limits
	written  int64
	packets  int64
	conns    int
	stopped  bool
	reason   string
	err      error
	timer    *time.Timer
	onStop   func(reason string)
	started  time.Time
	ipID     uint16
	scratch  []byte
	done     chan struct{}
	stopOnce sync.Once
}

// Status is a trace's progress.
type Status struct {
	Started time.Time `json:"started"`
	Bytes   int64     `json:"bytes"`
	Packets int64     `json:"packets"`
	Conns   int       `json:"connections"`
	Stopped bool      `json:"stopped"`
	// Reason is why it stopped: "stopped", "size limit", "time limit",
	// or a write error.
	Reason string `json:"reason,omitempty"`
}

const (
	linktypeRaw   = 101
	snapLen       = 262144
	pcapHeaderLen = 24
	recHeaderLen  = 16
	maxSegment    = 65000 // TCP payload per synthesized segment
)

// ErrLimits is returned for limits that are not positive.
var ErrLimits = errors.New("wiretrace: max bytes and duration must be positive")

// New starts a trace writing to f (which it closes when the trace stops).
// onStop, if not nil, is called once, without the trace's lock, when it
// stops for any reason.
func New(f io.WriteCloser, lim Limits, onStop func(reason string)) (*Trace, error) {
	if lim.MaxBytes <= pcapHeaderLen || lim.Duration <= 0 {
		return nil, ErrLimits
	}
	t := &Trace{f: f, w: bufio.NewWriterSize(f, 256<<10), lim: lim, onStop: onStop, started: time.Now(), done: make(chan struct{})}
	var h [pcapHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], snapLen)
	binary.LittleEndian.PutUint32(h[20:], linktypeRaw)
	if _, err := t.w.Write(h[:]); err != nil {
		f.Close()
		return nil, err
	}
	t.written = pcapHeaderLen
	t.timer = time.AfterFunc(lim.Duration, func() { t.stop("time limit") })
	return t, nil
}

// Stop ends the trace (flushing and closing the file) and returns its
// status. Stopping a stopped trace returns its status again.
func (t *Trace) Stop() Status {
	t.stop("stopped")
	return t.Status()
}

// Done is closed when the trace has stopped.
func (t *Trace) Done() <-chan struct{} { return t.done }

// Status returns the trace's progress.
func (t *Trace) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Status{Started: t.started, Bytes: t.written, Packets: t.packets, Conns: t.conns, Stopped: t.stopped, Reason: t.reason}
}

// Err is the write error that stopped the trace, if any.
func (t *Trace) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *Trace) stop(reason string) {
	t.mu.Lock()
	first := t.stopLocked(reason)
	t.mu.Unlock()
	if first {
		t.finish()
	}
}

// stopLocked marks the trace stopped and closes the file; the caller
// calls finish after unlocking if it returns true.
func (t *Trace) stopLocked(reason string) bool {
	if t.stopped {
		return false
	}
	t.stopped, t.reason = true, reason
	t.timer.Stop()
	if err := t.w.Flush(); err != nil && t.err == nil {
		t.err = err
	}
	if err := t.f.Close(); err != nil && t.err == nil {
		t.err = err
	}
	return true
}

func (t *Trace) finish() {
	t.stopOnce.Do(func() {
		close(t.done)
		if t.onStop != nil {
			t.onStop(t.Status().Reason)
		}
	})
}

// ConnInfo describes a traced connection.
type ConnInfo struct {
	// Initiator and Responder are the TCP endpoints (the MPA initiator
	// sent the SYN).
	Initiator, Responder netip.AddrPort
	// Local is true when this process is the responder (the target).
	LocalIsResponder bool
	// Request and Reply are the MPA Request and Reply frames to replay
	// at the start (RFC 5044 §7.1).
	Request, Reply []byte
}

// Conn is the tap of one connection: it implements iwarp.Tap.
type Conn struct {
	t                   *Trace
	local, remote       netip.AddrPort
	localSeq, remoteSeq uint32
}

// Conn starts tracing a connection: the synthesized handshake and MPA
// exchange are written at once. It returns nil if the trace has stopped.
func (t *Trace) Conn(info ConnInfo) *Conn {
	c := &Conn{t: t}
	ini, res := info.Initiator, info.Responder
	if info.LocalIsResponder {
		c.local, c.remote = res, ini
	} else {
		c.local, c.remote = ini, res
	}
	// Arbitrary initial sequence numbers, distinct per direction.
	iniSeq, resSeq := uint32(0x10000000), uint32(0x20000000)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil
	}
	t.conns++
	now := time.Now()
	t.segmentLocked(now, ini, res, iniSeq, 0, flagSYN, nil)
	t.segmentLocked(now, res, ini, resSeq, iniSeq+1, flagSYN|flagACK, nil)
	iniSeq++
	resSeq++
	t.segmentLocked(now, ini, res, iniSeq, resSeq, flagACK, nil)
	t.segmentLocked(now, ini, res, iniSeq, resSeq, flagACK|flagPSH, info.Request)
	iniSeq += uint32(len(info.Request))
	t.segmentLocked(now, res, ini, resSeq, iniSeq, flagACK|flagPSH, info.Reply)
	resSeq += uint32(len(info.Reply))
	if info.LocalIsResponder {
		c.localSeq, c.remoteSeq = resSeq, iniSeq
	} else {
		c.localSeq, c.remoteSeq = iniSeq, resSeq
	}
	return c
}

// TapRx records what one read brought (remote to local).
func (c *Conn) TapRx(a, b []byte) {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	now := time.Now()
	for _, p := range [2][]byte{a, b} {
		for len(p) > 0 && !t.stopped {
			k := min(len(p), maxSegment)
			t.segmentLocked(now, c.remote, c.local, c.remoteSeq, c.localSeq, flagACK|flagPSH, p[:k])
			c.remoteSeq += uint32(k)
			p = p[k:]
		}
	}
}

// TapTx records what one write sent (local to remote): n bytes of iov from
// offset off of iov[0].
func (c *Conn) TapTx(iov [][]byte, off, n int) {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	now := time.Now()
	buf := t.scratch[:0]
	for _, b := range iov {
		if n == 0 {
			break
		}
		if off > 0 {
			k := min(off, len(b))
			b, off = b[k:], off-k
		}
		k := min(len(b), n)
		buf = append(buf, b[:k]...)
		n -= k
		for len(buf) >= maxSegment && !t.stopped {
			t.segmentLocked(now, c.local, c.remote, c.localSeq, c.remoteSeq, flagACK|flagPSH, buf[:maxSegment])
			c.localSeq += maxSegment
			buf = append(buf[:0], buf[maxSegment:]...)
		}
	}
	if len(buf) > 0 && !t.stopped {
		t.segmentLocked(now, c.local, c.remote, c.localSeq, c.remoteSeq, flagACK|flagPSH, buf)
		c.localSeq += uint32(len(buf))
	}
	t.scratch = buf[:0]
}

// TCP flags.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagPSH = 0x08
	flagACK = 0x10
)

// segmentLocked writes one TCP segment as a pcap record; past the size
// limit it stops the trace instead (the caller holds mu).
func (t *Trace) segmentLocked(now time.Time, src, dst netip.AddrPort, seq, ack uint32, flags uint8, payload []byte) {
	v6 := src.Addr().Is6() && !src.Addr().Is4In6()
	ipLen := 20
	if v6 {
		ipLen = 40
	}
	plen := ipLen + 20 + len(payload)
	if t.written+recHeaderLen+int64(plen) > t.lim.MaxBytes {
		if t.stopLocked("size limit") {
			go t.finish() // onStop runs without the lock (and never in the QP's goroutine)
		}
		return
	}
	var hdr [recHeaderLen + 60]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(now.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(plen))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(plen))
	ip := hdr[recHeaderLen : recHeaderLen+ipLen]
	tcp := hdr[recHeaderLen+ipLen : recHeaderLen+ipLen+20]
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if v6 {
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(20+len(payload)))
		ip[6], ip[7] = 6, 64
		s16, d16 := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s16[:])
		copy(ip[24:], d16[:])
	} else {
		t.ipID++
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(plen))
		binary.BigEndian.PutUint16(ip[4:], t.ipID)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, 6
		s4, d4 := s.As4(), d.As4()
		copy(ip[12:], s4[:])
		copy(ip[16:], d4[:])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip)))
	}
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 0xFFFF)
	// TCP checksum over the pseudo header, the header and the payload.
	var ps uint32
	if v6 {
		ps = sum(ps, ip[8:40])
		ps += uint32(20 + len(payload))
		ps += 6
	} else {
		ps = sum(ps, ip[12:20])
		ps += 6
		ps += uint32(20 + len(payload))
	}
	ps = sum(ps, tcp)
	ps = sumOdd(ps, payload)
	binary.BigEndian.PutUint16(tcp[16:], ^fold(ps))
	if _, err := t.w.Write(hdr[:recHeaderLen+ipLen+20]); err == nil {
		_, err = t.w.Write(payload)
		if err != nil {
			t.failLocked(err)
			return
		}
	} else {
		t.failLocked(err)
		return
	}
	t.written += int64(recHeaderLen + plen)
	t.packets++
}

func (t *Trace) failLocked(err error) {
	if t.err == nil {
		t.err = err
	}
	if t.stopLocked("write error: " + err.Error()) {
		go t.finish()
	}
}

// sum adds b (even length) to the one's complement sum s.
func sum(s uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	return s
}

// sumOdd is sum for any length (a last odd byte is padded with zero).
func sumOdd(s uint32, b []byte) uint32 {
	s = sum(s, b)
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
