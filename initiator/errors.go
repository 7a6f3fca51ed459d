package initiator

import (
	"errors"
	"fmt"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// Errors of the initiator.
var (
	// ErrControllerClosed is returned for I/O on a controller that Close
	// has shut down (or is shutting down).
	ErrControllerClosed = errors.New("initiator: controller closed")
	// ErrControllerLost is wrapped by the error of I/O that could not be
	// sent again because the controller was given up: the connection was
	// lost and no reconnect succeeded within CtrlLossTimeout (Linux:
	// "Removing controller...", the I/O fails with BLK_STS_IOERR).
	ErrControllerLost = errors.New("initiator: controller lost")
	// ErrNamespaceGone is returned for I/O on a namespace that a rescan
	// found no longer active.
	ErrNamespaceGone = errors.New("initiator: namespace no longer active")
	// ErrNoIOQueues means the controller granted no I/O queue (Set
	// Features Number of Queues failed), so namespaces cannot be read or
	// written (Linux keeps such a controller as admin-only).
	ErrNoIOQueues = errors.New("initiator: controller has no I/O queues")
	// ErrNotReady means CSTS.RDY did not follow CC.EN within the
	// controller's ready timeout (CAP.TO, or CRTO), or CSTS.CFS was set.
	ErrNotReady = errors.New("initiator: controller not ready")
	// ErrCommandTimeout is the cause of error recovery when a command was
	// outstanding longer than its timeout (nvme_rdma_timeout).
	ErrCommandTimeout = errors.New("initiator: command timed out")
	// ErrKeepAlive is the cause of error recovery when a Keep Alive failed
	// or timed out (nvme_keep_alive_end_io).
	ErrKeepAlive = errors.New("initiator: keep alive failed")
	// ErrPathDown is the error a multipath command gets back from a path
	// that cannot carry it (its controller is not live, or the connection
	// ended under it): the head sends it on another path.
	ErrPathDown = errors.New("initiator: path down")
	// ErrNoPath is returned for multipath I/O when no path can carry it
	// and none may come back (every controller given up, or past
	// FastIOFailTimeout): nvme_ns_head_submit_bio's "no available path".
	ErrNoPath = errors.New("initiator: no available path")
)

// ConnectError is a Fabrics Connect that the controller refused with an
// NVMe status, decoded the way Linux's nvmf_log_connect_error explains it.
type ConnectError struct {
	// QID is the queue being connected (0 = admin).
	QID uint16
	// SubNQN and HostNQN are what the Connect data carried.
	SubNQN, HostNQN string
	// CNTLID is the controller ID the Connect data carried.
	CNTLID uint16
	// Status is the completion status.
	Status nvmeof.Status
	// Result is the completion DW0: for Connect Invalid Parameters, IATTR
	// (bit 16: the offset is in the Connect data) and IPO (bits 15..0).
	Result uint32
}

// Error explains the refusal (protocol.md §9.1).
func (e *ConnectError) Error() string {
	return fmt.Sprintf("connect (qid %d) to %s refused: %s (%v)", e.QID, e.SubNQN, e.Reason(), e.Status)
}

// Reason is the human part of Error: which parameter the controller
// refused, or why.
func (e *ConnectError) Reason() string {
	switch e.Status.Code() {
	case nvmeof.StatusConnectInvalidParameters:
		inData, off := nvmeof.ConnectResponse(e.Result).InvalidParam()
		if inData {
			switch off {
			case nvmeof.ConnectDataOffSUBNQN:
				return fmt.Sprintf("unknown subsystem: the controller has no subsystem %q (Connect Invalid Data Parameter, subsysnqn)", e.SubNQN)
			case nvmeof.ConnectDataOffHOSTNQN:
				return fmt.Sprintf("invalid host NQN %q (Connect Invalid Data Parameter, hostnqn)", e.HostNQN)
			case nvmeof.ConnectDataOffCNTLID:
				return fmt.Sprintf("invalid controller ID %d (Connect Invalid Data Parameter, cntlid)", e.CNTLID)
			case nvmeof.ConnectDataOffHOSTID:
				return "invalid host ID (Connect Invalid Data Parameter, hostid)"
			}
			return fmt.Sprintf("invalid Connect data at offset %d (Connect Invalid Data Parameter)", off)
		}
		switch off {
		case nvmeof.ConnectSQEOffQID:
			return fmt.Sprintf("invalid queue ID %d (Connect Invalid SQE Parameter, qid)", e.QID)
		case nvmeof.ConnectSQEOffSQSIZE:
			return "invalid queue size (Connect Invalid SQE Parameter, sqsize)"
		case nvmeof.ConnectSQEOffKATO:
			return "invalid keep-alive timeout (Connect Invalid SQE Parameter, kato)"
		}
		return fmt.Sprintf("invalid Connect command field at offset %d (Connect Invalid SQE Parameter)", off)
	case nvmeof.StatusConnectInvalidHost:
		return fmt.Sprintf("host not allowed: subsystem %s does not allow host %s (Connect Invalid Host)", e.SubNQN, e.HostNQN)
	case nvmeof.StatusConnectIncompatibleFormat:
		return "incompatible Connect record format"
	case nvmeof.StatusConnectControllerBusy:
		return "controller busy"
	case nvmeof.StatusConnectRestartDiscovery:
		return "restart discovery"
	case nvmeof.StatusAuthRequired:
		return "authentication required (not supported)"
	}
	return "Connect command failed"
}

// Unwrap returns the status, so errors.Is(err, nvmeof.StatusX) and
// errors.As(err, &status) work.
func (e *ConnectError) Unwrap() error { return e.Status }

// UnknownSubsystem reports whether the controller refused the subsystem
// NQN (Connect Invalid Parameters at SUBNQN).
func (e *ConnectError) UnknownSubsystem() bool {
	inData, off := nvmeof.ConnectResponse(e.Result).InvalidParam()
	return e.Status.Code() == nvmeof.StatusConnectInvalidParameters && inData && off == nvmeof.ConnectDataOffSUBNQN
}

// HostNotAllowed reports whether the subsystem refused this host
// (Connect Invalid Host).
func (e *ConnectError) HostNotAllowed() bool {
	return e.Status.Code() == nvmeof.StatusConnectInvalidHost
}

// AlignmentError is an I/O whose offset or length is not a multiple of the
// namespace's logical block size.
type AlignmentError struct {
	Offset, Length int64
	BlockSize      int
}

// Error names the misaligned values.
func (e *AlignmentError) Error() string {
	return fmt.Sprintf("initiator: I/O at offset %d of %d bytes is not aligned to the %d-byte logical block", e.Offset, e.Length, e.BlockSize)
}

// RangeError is an I/O that ends beyond the namespace.
type RangeError struct {
	Offset, Length, Size int64
}

// Error names the range and the namespace size.
func (e *RangeError) Error() string {
	return fmt.Sprintf("initiator: I/O at offset %d of %d bytes ends beyond the namespace (%d bytes)", e.Offset, e.Length, e.Size)
}

// CommandError is an admin command that failed, with its name.
type CommandError struct {
	Command string // e.g. "Identify Controller"
	Err     error  // an nvmeof.Status or a transport error
}

// Error names the command.
func (e *CommandError) Error() string { return e.Command + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *CommandError) Unwrap() error { return e.Err }
