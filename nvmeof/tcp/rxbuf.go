package tcp

import (
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// Placement of large PDU data (issue 25), as the iWARP engine places large
// payloads (iwarp/rx.go): the data of a C2HData, H2CData or CapsuleCmd PDU
// of at least DefaultDirectMin bytes that has not arrived yet is read
// straight from the socket into the command's buffer, with one readv(2)
// whose second iovec is a short tail of the read-ahead buffer (the data
// digest and the next PDU's header, rxTail bytes): the read stops there,
// and what follows is read the read-ahead way. Data that one read already
// brought into the read-ahead buffer together with its header is copied
// from there (a copy of a few KiB out of a buffer the read just filled
// costs less than a system call). Smaller data takes the read-ahead way
// (4 KiB at QD1 reads header and data with one read, as before).
//
// Every check of the PDU against the command it names (CID, TTAG, offset,
// length within the command's buffer and MAXH2CDATA) is made from the
// header before a byte of its data is read, so the straight read writes
// nowhere the read-ahead copy would not; the data digest, when in use, is
// checked after the data is placed, as before (TCP 1.0 §3.6.2.1: a data
// digest error fails the command with a transient transport error; the
// data in the buffer is not delivered as good).
const (
	// DefaultDirectMin is the smallest PDU data read straight into place
	// (Config.DirectMin, HostConfig.DirectMin): the iWARP engine's
	// rxDirectMin.
	DefaultDirectMin = 16 << 10
	// rxTail: the data digest, then the longest header a queue receives
	// (a CapsuleCmd with its header digest).
	rxTail = 2*4 + 72
)

// directMinFromEnv is the straight placement's threshold the environment
// sets for every queue whose configuration leaves it at 0:
// NVMETD_RX_PLACEMENT=copy turns it off (every byte through the read-ahead
// buffer, as before issue 25), for an on/off comparison of one build.
var directMinFromEnv = func() int {
	if strings.EqualFold(os.Getenv("NVMETD_RX_PLACEMENT"), "copy") {
		return -1
	}
	return DefaultDirectMin
}()

// rxWide: NVMETD_RX_PLACEMENT=wide, the straight read's second iovec is
// the whole read-ahead buffer instead of rxTail bytes (fewer reads, what
// follows the data copied); as the iWARP engine's rxWide.
var rxWide = strings.EqualFold(os.Getenv("NVMETD_RX_PLACEMENT"), "wide")

// directMin resolves a configured threshold: 0 the default (or the
// environment's), negative off.
func directMin(v int) int {
	if v == 0 {
		v = directMinFromEnv
	}
	if v < 0 {
		return 0
	}
	return v
}

// rxReader is a queue's read-ahead buffer over its socket: headers and
// small data are read the read-ahead way (one read brings what has
// arrived, up to the buffer's size); ReadData reads large PDU data straight
// into place (see DefaultDirectMin). Only the queue's receive goroutine
// reads; the counters may be read by anyone.
type rxReader struct {
	buf  []byte
	r, w int
	err  error // a read error after data (returned once the data is read)
	src  io.Reader
	sock *pollConn // src's raw socket reader, or nil (no readv: no straight reads)
	min  int       // the straight placement's threshold; 0: off

	// Data bytes of PDUs copied out of the read-ahead buffer and read
	// straight into place.
	dataCopied, dataDirect atomic.Uint64
}

func newRxReader(src io.Reader, sock *pollConn, size, directMin int) *rxReader {
	if sock == nil {
		directMin = 0
	}
	return &rxReader{buf: make([]byte, size), src: src, sock: sock, min: directMin}
}

// Buffered is the number of bytes read ahead.
func (b *rxReader) Buffered() int { return b.w - b.r }

// fill reads once into the free end of the buffer.
func (b *rxReader) fill() error {
	if b.err != nil {
		err := b.err
		b.err = nil
		return err
	}
	if b.r == b.w {
		b.r, b.w = 0, 0
	} else if b.r > 0 && b.w == len(b.buf) {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	n, err := b.src.Read(b.buf[b.w:])
	b.w += n
	if n > 0 && err != nil {
		b.err = err
		err = nil
	}
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Read reads up to len(p) bytes (io.Reader): buffered bytes first; with
// none, a p at least as large as the buffer is read into directly.
func (b *rxReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err == nil && len(p) >= len(b.buf) {
			return b.src.Read(p)
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// ReadFull fills p (io.ReadFull).
func (b *rxReader) ReadFull(p []byte) error {
	_, err := io.ReadFull(b, p)
	return err
}

// WaitByte waits until at least one byte is buffered.
func (b *rxReader) WaitByte() error {
	for b.r == b.w {
		if err := b.fill(); err != nil {
			return err
		}
	}
	return nil
}

// Peek returns the next n bytes without consuming them (n ≤ the buffer).
func (b *rxReader) Peek(n int) ([]byte, error) {
	for b.w-b.r < n {
		if b.r > 0 && len(b.buf)-b.r < n {
			copy(b.buf, b.buf[b.r:b.w])
			b.w -= b.r
			b.r = 0
		}
		if err := b.fill(); err != nil {
			return nil, err
		}
	}
	return b.buf[b.r : b.r+n], nil
}

// ReadData fills p with a PDU's data: what is buffered is copied, and
// the rest, if p is at least the threshold, is read straight from the
// socket into p (each readv's second iovec the read-ahead buffer's first
// rxTail bytes, empty by then); else the read-ahead way.
func (b *rxReader) ReadData(p []byte) error {
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	b.dataCopied.Add(uint64(n))
	rest := p[n:]
	if len(rest) == 0 {
		return nil
	}
	if b.min == 0 || len(p) < b.min || b.err != nil {
		for len(rest) > 0 {
			direct := b.r == b.w && b.err == nil && len(rest) >= len(b.buf)
			m, err := b.Read(rest)
			if direct {
				b.dataDirect.Add(uint64(m))
			} else {
				b.dataCopied.Add(uint64(m))
			}
			rest = rest[m:]
			if err != nil {
				return err
			}
		}
		return nil
	}
	// The buffer is empty (all of it went into p).
	b.r, b.w = 0, 0
	tail := b.buf[:min(rxTail, len(b.buf))]
	if rxWide {
		tail = b.buf
	}
	for len(rest) > 0 {
		m, err := b.sock.readv(rest, tail)
		d := min(m, len(rest))
		b.dataDirect.Add(uint64(d))
		rest = rest[d:]
		b.w = m - d
		if err != nil {
			if len(rest) == 0 {
				b.err = err
				return nil
			}
			return err
		}
	}
	return nil
}
