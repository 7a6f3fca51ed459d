package iwarp

import (
	"net"
	"net/netip"
	"sync/atomic"
)

// Tap sees the bytes of a QP's connection as they cross the socket, for
// wire traces. A tap set on a running QP sees each direction from its next
// FPDU boundary on (so that a decoder can follow the FPDUs), and then every
// byte until it is removed. TapRx runs on the QP's receive goroutine, TapTx
// on whichever goroutine writes: the two may run at once. Both must not
// block long: the QP waits for them.
type Tap interface {
	// TapRx gets what one read brought: a, then b.
	TapRx(a, b []byte)
	// TapTx gets what one write sent: n bytes of iov from offset off of
	// iov[0].
	TapTx(iov [][]byte, off, n int)
}

// tapBox holds a Tap for atomic.Pointer.
type tapBox struct{ t Tap }

// tapState is a direction's alignment with the FPDU stream.
type tapState struct {
	on bool // the tap sees this direction (from a boundary on)
}

// SetTap sets (or, with nil, removes) the QP's tap. Without a tap the data
// path pays one atomic load per read and per write.
func (qp *QP) SetTap(t Tap) {
	if t == nil {
		qp.tap.Store(nil)
		return
	}
	qp.tap.Store(&tapBox{t})
}

// tapPointer is the QP's tap, if any.
type tapPointer = atomic.Pointer[tapBox]

// txAtBatchStart reports whether the pending batch has not been written at
// all: its first byte starts an FPDU.
func (e *engine) txAtBatchStart() bool { return e.tx.iovIdx == 0 && e.tx.iovOff == 0 }

// TapInfo is what a wire trace needs to know of a QP's connection.
type TapInfo struct {
	// Local and Remote are the TCP endpoints; Responder says which one
	// accepted (the local one when true).
	Local, Remote netip.AddrPort
	Responder     bool
	// Request and Reply are the MPA Request and Reply frames exchanged
	// (RFC 5044 §7.1, RFC 6581), as sent.
	Request, Reply []byte
}

// TapInfo returns the QP's connection endpoints and MPA frames (zero
// before it connected).
func (qp *QP) TapInfo() TapInfo {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	ti := TapInfo{Responder: qp.responder, Request: qp.mpaRequest, Reply: qp.mpaReply}
	if a, ok := qp.localAddr.(*net.TCPAddr); ok {
		ti.Local = a.AddrPort()
	}
	if a, ok := qp.remote.(*net.TCPAddr); ok {
		ti.Remote = a.AddrPort()
	}
	return ti
}
