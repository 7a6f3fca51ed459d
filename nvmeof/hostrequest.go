package nvmeof

import "errors"

// Errors of a host queue, shared by the transport bindings (nvmeof/rdma,
// nvmeof/tcp) so that the host's controller acts on them the same way over
// either transport.
var (
	// ErrQueueFull means every command slot of a host queue (or the SQ, by
	// its head pointer) is taken.
	ErrQueueFull = errors.New("nvmeof: host queue full")
	// ErrQueueClosed means the queue's connection has ended; the command
	// may not have reached the controller.
	ErrQueueClosed = errors.New("nvmeof: host queue closed")
)

// HostRequest is a command submitted on a host queue of any transport
// binding. Reuse it: it holds the command, its data buffer and its
// completion, and nothing in it is allocated per submission.
type HostRequest struct {
	// SQE is the command; Submit sets its CID and SGL1.
	SQE SQE
	// Data is the data buffer, used in place (nil: no data). Read data is
	// placed straight into it and write data is sent straight from it.
	Data []byte
	// Write says the data goes host-to-controller.
	Write bool
	// Done is called once the command has completed, on the queue's
	// receive goroutine: it must not block.
	Done func(*HostRequest)
	// CQE is the completion (valid in Done when Err is nil).
	CQE CQE
	// Err is a transport failure (wrapping ErrQueueClosed); the command's
	// NVMe status is in CQE.
	Err error
}

// Status is the command's NVMe status, or an error for a transport failure.
func (r *HostRequest) Status() error {
	if r.Err != nil {
		return r.Err
	}
	if st := r.CQE.Status(); st != StatusSuccess {
		return st
	}
	return nil
}
