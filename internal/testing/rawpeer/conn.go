// Package rawpeer is a hand-driven iWARP and NVMe/RDMA host for hostile-peer
// tests: it speaks MPA (RFC 5044, RFC 6581), DDP/RDMAP FPDUs (RFC 5041, RFC
// 5040) and NVMe/RDMA capsules over a real TCP socket, built from the pure
// codecs of iwarp/wire, nvmeof and nvmeof/rdma, with every field under the
// test's control: MPA frames with any key, flags, revision and private data;
// FPDUs with any length, header, MSN, MO, STag, TO and CRC; and the socket
// itself (a small receive buffer, reading or not reading, partial frames,
// FIN, half-close, RST).
//
// It can also play a correct host (see Queue and Host) far enough to reach
// every state of a target's queue: MPA done, Connect sent, Connect accepted,
// I/O queue open, commands with keyed data. The host's memory is the peer's
// own: Register gives a buffer an STag; the target's RDMA Writes are placed
// into it and its RDMA Read Requests are answered from it (or ignored, if
// the test says so).
//
// Nothing here runs in the background: bytes move only when the test calls
// a method, so "a host that stops reading" is a test that does not call
// Next.
package rawpeer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// DefaultTimeout bounds a blocking read or write when the caller gives no
// deadline. It is a guard against a hung test, not a protocol bound.
const DefaultTimeout = 60 * time.Second

// Options are the socket settings of a connection.
type Options struct {
	// RecvBuffer and SendBuffer set SO_RCVBUF and SO_SNDBUF before the
	// connection is made (0: kernel default). A small RecvBuffer makes a
	// peer's writes stall quickly once the test stops reading.
	RecvBuffer, SendBuffer int
	// LocalAddr is the local address to connect from (nil: any).
	LocalAddr *net.TCPAddr
	// Timeout replaces DefaultTimeout.
	Timeout time.Duration
	// CRC makes ConnectHost and ConnectIO ask for MPA CRCs (C=1).
	CRC bool
}

// Conn is one TCP connection to an iWARP responder.
type Conn struct {
	nc      *net.TCPConn
	timeout time.Duration

	// CRC reports that MPA CRCs are in use (set by Handshake: either
	// frame had C=1); Frame computes and ReadFPDU checks them.
	CRC bool
	// Req and Reply are the MPA frames of the handshake.
	Req, Reply wire.MPAFrame
	// MaxSegment is the largest payload of one outbound FPDU (default
	// 16 KiB).
	MaxSegment int

	wmu sync.Mutex
	msn [wire.NumQN]uint32 // last MSN sent per untagged queue

	rbuf       []byte
	rpos, rend int
	rerr       error
}

// Dial connects to addr ("host:port") over TCP.
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if o.RecvBuffer > 0 {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, o.RecvBuffer)
			}
			if serr == nil && o.SendBuffer > 0 {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, o.SendBuffer)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	if o.LocalAddr != nil {
		d.LocalAddr = o.LocalAddr
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rawpeer: dial %s: %w", addr, err)
	}
	return newConn(c.(*net.TCPConn), o), nil
}

func newConn(nc *net.TCPConn, o Options) *Conn {
	t := o.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	_ = nc.SetNoDelay(true)
	return &Conn{nc: nc, timeout: t, MaxSegment: 16 << 10, rbuf: make([]byte, 256<<10)}
}

// TCP is the underlying socket.
func (c *Conn) TCP() *net.TCPConn { return c.nc }

// LocalAddr is the connection's local address.
func (c *Conn) LocalAddr() *net.TCPAddr { return c.nc.LocalAddr().(*net.TCPAddr) }

// RemoteAddr is the responder's address.
func (c *Conn) RemoteAddr() *net.TCPAddr { return c.nc.RemoteAddr().(*net.TCPAddr) }

func (c *Conn) deadline(d time.Time) time.Time {
	if d.IsZero() {
		return time.Now().Add(c.timeout)
	}
	return d
}

// WriteRaw writes b as is (a partial frame, garbage, anything), bounded by
// the default timeout.
func (c *Conn) WriteRaw(b []byte) error {
	return c.WriteRawDeadline(b, time.Time{})
}

// WriteRawDeadline writes b, giving up at deadline (zero: the default
// timeout). A peer that stopped reading makes it fail with
// os.ErrDeadlineExceeded.
func (c *Conn) WriteRawDeadline(b []byte, deadline time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(c.deadline(deadline))
	_, err := c.nc.Write(b)
	return err
}

// CloseWrite sends a FIN and keeps the read side open (half-close).
func (c *Conn) CloseWrite() error { return c.nc.CloseWrite() }

// Close closes the socket. The kernel sends a FIN, or an RST if received
// bytes were left unread.
func (c *Conn) Close() error { return c.nc.Close() }

// Abort closes the socket with an RST (SO_LINGER 0).
func (c *Conn) Abort() error {
	_ = c.nc.SetLinger(0)
	return c.nc.Close()
}

// SetRecvBuffer changes SO_RCVBUF on the open connection (the window the
// peer sees shrinks as the buffer fills; set it before Dial with
// Options.RecvBuffer to keep the window small from the start).
func (c *Conn) SetRecvBuffer(n int) error { return c.nc.SetReadBuffer(n) }

// fill makes at least n bytes available in the read buffer.
func (c *Conn) fill(n int, deadline time.Time) error {
	if n > len(c.rbuf) {
		nb := make([]byte, n)
		c.rend = copy(nb, c.rbuf[c.rpos:c.rend])
		c.rbuf, c.rpos = nb, 0
	}
	for c.rend-c.rpos < n {
		if c.rerr != nil {
			if c.rend > c.rpos && errors.Is(c.rerr, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return c.rerr
		}
		if c.rpos > 0 && len(c.rbuf)-c.rpos < n {
			c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
			c.rpos = 0
		}
		_ = c.nc.SetReadDeadline(c.deadline(deadline))
		m, err := c.nc.Read(c.rbuf[c.rend:])
		c.rend += m
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return err // not sticky: the caller may read on later
			}
			c.rerr = err
		}
	}
	return nil
}

// take consumes n buffered bytes and returns a copy.
func (c *Conn) take(n int) []byte {
	b := make([]byte, n)
	copy(b, c.rbuf[c.rpos:c.rpos+n])
	c.rpos += n
	return b
}

// Buffered is the number of received bytes not yet consumed.
func (c *Conn) Buffered() int { return c.rend - c.rpos }

// ReadRaw reads exactly n bytes.
func (c *Conn) ReadRaw(n int, deadline time.Time) ([]byte, error) {
	if err := c.fill(n, deadline); err != nil {
		return nil, err
	}
	return c.take(n), nil
}

// --- MPA (RFC 5044 §7.1, RFC 6581 §5) ---

// Request is an enhanced (revision 2, RFC 6581) MPA request as the Linux
// host sends it, with IRD and ORD 16 and privateData after the IRD/ORD word.
func Request(privateData []byte) wire.MPAFrame {
	return wire.MPAFrame{Revision: 2, Enhanced: true, IRD: 16, ORD: 16, PrivateData: privateData}
}

// WriteMPA sends an MPA frame as encoded by wire (no limits checked).
func (c *Conn) WriteMPA(f wire.MPAFrame) error {
	return c.WriteRaw(f.Append(nil))
}

// ReadMPA reads one MPA frame (any key), accepting up to maxPD bytes of
// private data (0: 65535, the field's range).
func (c *Conn) ReadMPA(maxPD int, deadline time.Time) (wire.MPAFrame, error) {
	if maxPD <= 0 {
		maxPD = 0xFFFF
	}
	if err := c.fill(wire.MPAHeaderLen, deadline); err != nil {
		return wire.MPAFrame{}, fmt.Errorf("rawpeer: MPA frame header: %w", err)
	}
	n := int(binary.BigEndian.Uint16(c.rbuf[c.rpos+18:]))
	if n > maxPD {
		return wire.MPAFrame{}, fmt.Errorf("rawpeer: MPA frame with %d bytes of private data", n)
	}
	if err := c.fill(wire.MPAHeaderLen+n, deadline); err != nil {
		return wire.MPAFrame{}, fmt.Errorf("rawpeer: MPA private data: %w", err)
	}
	b := c.take(wire.MPAHeaderLen + n)
	f, _, err := wire.ParseMPAFrame(b, maxPD)
	return f, err
}

// RejectedError is an MPA reply with the Reject flag.
type RejectedError struct{ Reply wire.MPAFrame }

func (e *RejectedError) Error() string {
	return fmt.Sprintf("rawpeer: MPA request rejected (%d bytes of private data)", len(e.Reply.PrivateData))
}

// Handshake sends the MPA request and reads the reply. A reject returns the
// reply and a *RejectedError. On success the connection is in RDMA mode
// with MSNs starting at 1 and CRC in use if either frame asked for it.
func (c *Conn) Handshake(req wire.MPAFrame, deadline time.Time) (wire.MPAFrame, error) {
	c.Req = req
	if err := c.WriteMPA(req); err != nil {
		return wire.MPAFrame{}, fmt.Errorf("rawpeer: MPA request: %w", err)
	}
	rep, err := c.ReadMPA(0, deadline)
	if err != nil {
		return rep, err
	}
	c.Reply = rep
	if !rep.Reply {
		return rep, fmt.Errorf("rawpeer: MPA answer has the request key")
	}
	if rep.Reject {
		return rep, &RejectedError{Reply: rep}
	}
	c.CRC = req.CRC || rep.CRC
	c.msn = [wire.NumQN]uint32{}
	return rep, nil
}

// --- FPDUs (RFC 5044 §4, RFC 5041 §5, RFC 5040 §4) ---

// Untagged encodes an untagged DDP segment: the DDP/RDMAP header (without
// the MPA length field) followed by payload.
func Untagged(op wire.Opcode, last bool, inv, qn, msn, mo uint32, payload []byte) []byte {
	h := make([]byte, wire.UntaggedHeaderLen, wire.UntaggedHeaderLen+len(payload))
	wire.PutUntaggedHeader(h, op, last, inv, qn, msn, mo, len(payload))
	return append(h[wire.FPDULenFieldLen:], payload...)
}

// Tagged encodes a tagged DDP segment (header without the length field,
// then payload).
func Tagged(op wire.Opcode, last bool, stag uint32, to uint64, payload []byte) []byte {
	h := make([]byte, wire.TaggedHeaderLen, wire.TaggedHeaderLen+len(payload))
	wire.PutTaggedHeader(h, op, last, stag, to, len(payload))
	return append(h[wire.FPDULenFieldLen:], payload...)
}

// Frame makes an FPDU of a DDP segment: ULPDU_Length = len(seg), the
// segment, the pad and the CRC (computed if CRC is in use, else zero).
func (c *Conn) Frame(seg []byte) []byte {
	return c.FrameLen(seg, len(seg))
}

// FrameLen is Frame with any ULPDU_Length field value; pad and CRC follow
// the real segment length.
func (c *Conn) FrameLen(seg []byte, ulpduLen int) []byte {
	b := binary.BigEndian.AppendUint16(make([]byte, 0, wire.FPDULen(len(seg))), uint16(ulpduLen))
	b = append(b, seg...)
	b = append(b, wire.Pad(wire.PadLen(len(seg)))...)
	var crc [wire.CRCLen]byte
	if c.CRC {
		wire.PutCRC(crc[:], wire.CRC(b))
	}
	return append(b, crc[:]...)
}

// NextMSN returns the next MSN of untagged queue qn and counts it as used.
func (c *Conn) NextMSN(qn uint32) uint32 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.msn[qn]++
	return c.msn[qn]
}

// SendMessage sends a whole untagged message (a Send variant, with inv as
// the Invalidate STag) on QN 0 with the next MSN, in segments of at most
// MaxSegment bytes.
func (c *Conn) SendMessage(op wire.Opcode, inv uint32, payload []byte, deadline time.Time) error {
	msn := c.NextMSN(wire.QNSend)
	var b []byte
	for off := 0; ; {
		n := min(len(payload)-off, c.MaxSegment)
		last := off+n == len(payload)
		b = append(b, c.Frame(Untagged(op, last, inv, wire.QNSend, msn, uint32(off), payload[off:off+n]))...)
		off += n
		if last {
			break
		}
	}
	return c.WriteRawDeadline(b, deadline)
}

// Send sends payload as one Send message.
func (c *Conn) Send(payload []byte) error {
	return c.SendMessage(wire.OpSend, 0, payload, time.Time{})
}

// SendTagged sends a tagged message (RDMA Write or Read Response) of
// payload to stag at to, in segments of at most MaxSegment bytes.
func (c *Conn) SendTagged(op wire.Opcode, stag uint32, to uint64, payload []byte, deadline time.Time) error {
	var b []byte
	for off := 0; ; {
		n := min(len(payload)-off, c.MaxSegment)
		last := off+n == len(payload)
		b = append(b, c.Frame(Tagged(op, last, stag, to+uint64(off), payload[off:off+n]))...)
		off += n
		if last {
			break
		}
	}
	return c.WriteRawDeadline(b, deadline)
}

// SendReadRequest sends an RDMA Read Request on QN 1 with the next MSN.
func (c *Conn) SendReadRequest(rr wire.ReadRequest) error {
	body := make([]byte, wire.ReadRequestLen)
	rr.Encode(body)
	msn := c.NextMSN(wire.QNReadRequest)
	return c.WriteRaw(c.Frame(Untagged(wire.OpReadRequest, true, 0, wire.QNReadRequest, msn, 0, body)))
}

// SendTerminate sends a Terminate (RFC 5040 §4.8: QN 2, MSN 1, MO 0, last).
func (c *Conn) SendTerminate(t wire.Terminate) error {
	return c.WriteRaw(c.Frame(Untagged(wire.OpTerminate, true, 0, wire.QNTerminate, 1, 0, t.AppendPayload(nil))))
}

// FPDU is a received FPDU.
type FPDU struct {
	Header wire.Header
	// Payload is the ULP payload (after the DDP/RDMAP header).
	Payload []byte
	// CRCOK is false when CRC is in use and the CRC field is wrong.
	CRCOK bool
	// Raw is the whole FPDU as received (length field to CRC).
	Raw []byte
}

// ReadFPDU reads the next FPDU. It fails with the socket's error (io.EOF
// after a FIN, ECONNRESET after an RST, os.ErrDeadlineExceeded at the
// deadline) or with a decoding error for bytes that are not an FPDU.
func (c *Conn) ReadFPDU(deadline time.Time) (*FPDU, error) {
	if err := c.fill(wire.FPDULenFieldLen, deadline); err != nil {
		return nil, err
	}
	n := wire.FPDULen(wire.ULPDULength(c.rbuf[c.rpos:]))
	if err := c.fill(n, deadline); err != nil {
		return nil, err
	}
	b := c.take(n)
	f := &FPDU{CRCOK: true, Raw: b}
	hl, err := wire.DecodeHeader(b, &f.Header)
	if err != nil {
		return nil, fmt.Errorf("rawpeer: undecodable FPDU % x: %w", b[:min(len(b), 32)], err)
	}
	end := wire.FPDULenFieldLen + int(f.Header.ULPDULen)
	f.Payload = b[hl:end]
	if c.CRC {
		f.CRCOK = wire.GetCRC(b[n-wire.CRCLen:]) == wire.CRC(b[:n-wire.CRCLen])
	}
	return f, nil
}

// Closed says how a connection ended.
type Closed int

// How a connection ended.
const (
	Open  Closed = iota // still open at the deadline
	ByFIN               // orderly close (read returned EOF)
	ByRST               // reset (ECONNRESET) or another socket error
)

func (c Closed) String() string {
	return [...]string{"still open", "FIN", "RST"}[c]
}

// WaitClosed reads (and keeps) FPDUs until the responder closes the
// connection or the deadline passes. Bytes that do not parse as FPDUs are
// skipped. It returns how the connection ended and what arrived before.
func (c *Conn) WaitClosed(deadline time.Time) (Closed, []*FPDU) {
	var got []*FPDU
	for {
		f, err := c.ReadFPDU(deadline)
		switch {
		case err == nil:
			got = append(got, f)
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			return Open, got
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return ByFIN, got
		case c.rerr != nil:
			return ByRST, got
		}
		// Undecodable bytes: drop what is buffered and read on.
		c.rpos = c.rend
	}
}

// Terminates returns the Terminate messages among frames, decoded (RFC
// layout, or siw's if its bits give it away).
func Terminates(frames []*FPDU) []wire.Terminate {
	var out []wire.Terminate
	for _, f := range frames {
		if f.Header.Opcode == wire.OpTerminate {
			if t, _, err := wire.DecodeTerminateAny(f.Payload); err == nil {
				out = append(out, t)
			}
		}
	}
	return out
}
