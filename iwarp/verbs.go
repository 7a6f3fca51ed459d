// Package iwarp is a user-space iWARP engine: MPA (RFC 5044, RFC 6581), DDP
// (RFC 5041) and RDMAP (RFC 5040) over ordinary TCP sockets, wire-compatible
// with the Linux soft-iWARP driver (siw).
//
// It exposes verbs in the shape of libibverbs and librdmacm: a protection
// domain (PD) registers caller-owned memory as memory regions (MR) named by
// STags; a queue pair (QP) carries work requests on its send and receive
// queues and reports work completions on completion queues (CQ); Listen,
// ConnRequest.Accept/Reject and Dial set up connections with private data
// and IRD/ORD negotiation.
//
// Data path: one QP is one TCP connection. Its protocol is a pure state
// machine (engine.go) driven by a receive goroutine that owns the read side
// and by whoever writes (see txClaim for the policy; a send goroutine takes
// over when the socket is full). Each read brings as many bytes as the
// socket has into a read-ahead buffer; payload bytes that arrived there
// with their header are copied into their destination (registered memory
// at STag+TO, or the posted receive buffer), and when a payload's bytes
// have not arrived yet, the next read goes straight into the destination
// (EngineStats counts both: PayloadCopied, PayloadDirect). Sends go out as
// vectored writes of headers, registered memory, pads and CRCs, many FPDUs
// per system call, without copying payloads over 256 bytes. Nothing is
// allocated per message in steady state.
package iwarp

import (
	"errors"
	"fmt"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// Access is a set of memory access rights of a memory region.
type Access uint8

// Access rights (as IBV_ACCESS_*).
const (
	AccessLocalWrite  Access = 1 << iota // the local QP may place data (receive, RDMA Read sink)
	AccessRemoteRead                     // the peer may RDMA Read
	AccessRemoteWrite                    // the peer may RDMA Write
)

// String lists the rights.
func (a Access) String() string {
	s := ""
	add := func(b Access, n string) {
		if a&b != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	add(AccessLocalWrite, "local-write")
	add(AccessRemoteRead, "remote-read")
	add(AccessRemoteWrite, "remote-write")
	if s == "" {
		return "none"
	}
	return s
}

// WROpcode is the operation of a send work request.
type WROpcode uint8

// Send work request operations.
const (
	WRSend      WROpcode = iota // Send
	WRSendInv                   // Send with Invalidate (InvalidateSTag)
	WRSendSE                    // Send with Solicited Event
	WRSendSEInv                 // Send with Solicited Event and Invalidate
	WRWrite                     // RDMA Write to RemoteSTag/RemoteTO
	WRRead                      // RDMA Read from RemoteSTag/RemoteTO into SinkMR
	wrOpcodeCount
)

var wrNames = [...]string{"Send", "SendInv", "SendSE", "SendSEInv", "Write", "Read"}

// String names the operation.
func (o WROpcode) String() string {
	if o < wrOpcodeCount {
		return wrNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

func (o WROpcode) rdmap() wire.Opcode {
	switch o {
	case WRSend:
		return wire.OpSend
	case WRSendInv:
		return wire.OpSendInv
	case WRSendSE:
		return wire.OpSendSE
	case WRSendSEInv:
		return wire.OpSendSEInv
	case WRWrite:
		return wire.OpWrite
	default:
		return wire.OpReadRequest
	}
}

// MaxSGE is the largest gather list of a send work request (siw's limit).
const MaxSGE = 6

// SendWR is a send work request. The QP copies it when it is posted; the
// memory that Local refers to belongs to the QP until the request completes.
type SendWR struct {
	ID     uint64   // returned in the completion
	Opcode WROpcode // operation
	// Signaled asks for a completion on success (errors always complete).
	Signaled bool
	// Local is the gather list of a Send or RDMA Write (at most MaxSGE
	// slices). The bytes go on the wire from these slices without a copy.
	Local [][]byte
	// RemoteSTag and RemoteTO address the peer's memory (Write: sink;
	// Read: source).
	RemoteSTag uint32
	RemoteTO   uint64
	// SinkMR and SinkOffset locate the local buffer an RDMA Read fills;
	// Length is the number of bytes to read.
	SinkMR     *MR
	SinkOffset uint64
	Length     uint32
	// InvalidateSTag is the peer's STag that a Send with Invalidate
	// invalidates.
	InvalidateSTag uint32
}

// RecvWR posts a receive buffer for one incoming Send message.
type RecvWR struct {
	ID  uint64 // returned in the completion
	Buf []byte // the message is placed here without a copy
}

// WCStatus is the status of a work completion.
type WCStatus uint8

// Work completion statuses (as IBV_WC_*): the ones the engine produces. A
// failed connection flushes every outstanding request (WCFlushErr); why it
// failed is the QP's Err.
const (
	WCSuccess        WCStatus = iota
	WCFlushErr                // the QP went to error before the request ran
	WCLocalLengthErr          // a received message was longer than the posted buffer
)

var wcStatusNames = [...]string{"success", "flush error", "local length error"}

// String names the status.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode says what completed.
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend WCOpcode = iota // a Send variant posted here
	WCWrite
	WCRead
	WCRecv // a Send variant received into a posted buffer
)

var wcOpNames = [...]string{"send", "write", "read", "recv"}

// String names the completion opcode.
func (o WCOpcode) String() string {
	if int(o) < len(wcOpNames) {
		return wcOpNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WC is a work completion.
type WC struct {
	ID     uint64
	QP     *QP
	Status WCStatus
	Opcode WCOpcode
	// ByteLen is the received message size (WCRecv) or the bytes moved.
	ByteLen int
	// Invalidated reports a received Send with Invalidate; InvalidatedSTag
	// is the local STag it invalidated.
	Invalidated     bool
	InvalidatedSTag uint32
	// Solicited reports a received Send with Solicited Event.
	Solicited bool
}

func wcOpFor(o WROpcode) WCOpcode {
	switch o {
	case WRWrite:
		return WCWrite
	case WRRead:
		return WCRead
	}
	return WCSend
}

// Errors of the verbs API.
var (
	// ErrQPState means the QP cannot take the request in its current state.
	ErrQPState = errors.New("iwarp: QP not in a state that accepts this request")
	// ErrQueueFull means the send or receive queue is at its depth.
	ErrQueueFull = errors.New("iwarp: work queue full")
	// ErrInvalidWR means a work request is malformed.
	ErrInvalidWR = errors.New("iwarp: invalid work request")
	// ErrClosed means the object was closed.
	ErrClosed = errors.New("iwarp: closed")
	// ErrStalled means the peer stopped sending in the middle of a frame.
	ErrStalled = errors.New("iwarp: peer stalled in the middle of an FPDU")
)

// TerminateError reports that a QP ended with an RDMAP Terminate, sent
// (Remote false: we detected the violation) or received (Remote true).
type TerminateError struct {
	Remote bool
	Cause  wire.Cause
	// SIWLayout is set for a received Terminate that was decoded in Linux
	// siw's host-order layout.
	SIWLayout bool
	Msg       string
}

func (e *TerminateError) Error() string {
	dir := "sent"
	if e.Remote {
		dir = "received"
	}
	s := "iwarp: terminate " + dir + ": " + e.Cause.String()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// RejectError reports that the peer rejected the connection in its MPA
// reply; PrivateData holds its reject data (after any MPA v2 header).
type RejectError struct {
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("iwarp: connection rejected by peer (%d bytes of private data)", len(e.PrivateData))
}
