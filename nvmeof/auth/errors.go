package auth

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// ErrTimeout is wrapped by the *Error of a transaction that timed out
// (Host.Expire, Controller.Expire).
var ErrTimeout = errors.New("authentication transaction timed out")

// Error is a failed authentication transaction, on either side.
type Error struct {
	// Message is the message being received or sent when it failed.
	Message MessageID
	// Explanation is the reason code explanation sent in (or, with Remote,
	// received in) an AUTH_Failure1/AUTH_Failure2; 0 when the transaction
	// failed otherwise (a command status, a timeout).
	Explanation Explanation
	// Remote is set when the peer reported the failure: the host received
	// AUTH_Failure1, the controller received AUTH_Failure2.
	Remote bool
	// CmdStatus is the NVMe status an Authentication Send or Receive
	// completed with, when that ended the transaction (host side).
	CmdStatus nvmeof.Status
	// Detail says what went wrong, for the log.
	Detail string
	// Err is an underlying error (ErrTimeout, ErrPublicValue, ...), or nil.
	Err error
}

// Error describes the failure.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("auth: ")
	b.WriteString(e.Message.String())
	b.WriteString(": ")
	switch {
	case e.Remote:
		fmt.Fprintf(&b, "peer reports failure: %v", e.Explanation)
	case e.Explanation != 0:
		b.WriteString(e.Explanation.String())
	case e.CmdStatus != 0:
		fmt.Fprintf(&b, "command failed: %v", e.CmdStatus)
	default:
		b.WriteString("failed")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Status returns the status a host reports for a failed authentication of
// a queue: the command status that ended it, else Authentication Required
// with DNR (what Linux 6.1's nvmf_connect_admin_queue/io_queue return).
func (e *Error) Status() nvmeof.Status {
	if e.CmdStatus != 0 {
		return e.CmdStatus
	}
	return nvmeof.StatusAuthRequired | nvmeof.StatusDNR
}

// CommandError is an Authentication Send or Receive command refused before
// its data is looked at (nvmet_execute_auth_send/_receive): Status goes into
// the completion and Offset is the byte offset in the SQE of the offending
// field (nvmet req->error_loc, for the error log).
type CommandError struct {
	Status nvmeof.Status
	Offset uint16
	Reason string
}

// Error describes the refusal.
func (e *CommandError) Error() string {
	return fmt.Sprintf("auth: command refused at SQE offset %d: %s: %v", e.Offset, e.Reason, e.Status)
}

// Unwrap returns the Status, so nvmeof.StatusFromError finds it.
func (e *CommandError) Unwrap() error { return e.Status }
