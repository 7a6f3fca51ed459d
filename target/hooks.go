package target

import (
	"errors"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestHooks make the real controller misbehave toward a host on purpose, at
// the NVMe level: they exist for the initiator's test suite, which runs
// against this target (not a second controller of its own) and needs the
// answers a correct controller never gives: a wrong command identifier, a
// controller that never becomes ready, one that falls silent, a queue that
// drops under a command, a status it would not return. Wire-level faults
// (bad RDMA Writes, Terminates) are the raw peer's (internal/testing/rawpeer).
//
// Unset, they cost one pointer test per command. Never set them in a
// production target.
type TestHooks struct {
	// Command is called for each command capsule as it arrives, before the
	// controller looks at it, on the queue's engine goroutine: it must not
	// block. It may rewrite the command in place (the response carries the
	// rewritten CID) and says what becomes of it.
	Command func(q HookQueue, sqe *nvmeof.SQE) Verdict
	// Response is called with each completion the controller sends
	// (asynchronous event completions included) before its response
	// capsule is built, and returns it, possibly with another status or
	// result.
	Response func(q HookQueue, sqe *nvmeof.SQE, rsp HookResponse) HookResponse
}

// HookAction is what a Command hook makes of a command.
type HookAction uint8

// Hook actions.
const (
	// HookProceed hands the command to the controller as usual.
	HookProceed HookAction = iota
	// HookFail answers the command at once with Verdict.Status, without
	// executing it.
	HookFail
	// HookHold never answers the command: it is released, unanswered, when
	// its queue's connection ends (a silent or stuck controller).
	HookHold
	// HookDisconnect closes the queue's connection without answering the
	// command (a controller that goes away under it).
	HookDisconnect
)

// Verdict is a Command hook's decision.
type Verdict struct {
	Action HookAction
	// Status is the status of HookFail.
	Status nvmeof.Status
}

// HookResponse is what a Response hook may change of a completion.
type HookResponse struct {
	Status nvmeof.Status
	// Result, when SetResult is true, replaces completion dwords 0 and 1.
	Result    uint64
	SetResult bool
}

// HookQueue is a queue as the hooks see it: comparable, valid for the
// target's lifetime.
type HookQueue struct{ q *queue }

// QID is the queue's identifier (0: admin).
func (h HookQueue) QID() uint16 { return h.q.qid }

// Disconnect closes the queue's connection gracefully, as if the target
// dropped it (its controller goes too if it is an admin queue). It may be
// called from any goroutine, more than once.
func (h HookQueue) Disconnect() { h.q.close() }

// SetTestHooks installs h (nil removes them). It must be called before
// Start.
func (t *Target) SetTestHooks(h *TestHooks) error {
	t.s.opMu.Lock()
	defer t.s.opMu.Unlock()
	if t.s.started {
		return errors.New("target: test hooks must be set before Start")
	}
	t.s.hooks = h
	return nil
}

// hookCommand runs the Command hook on a command that just arrived; it
// reports false when the hook took the command out of the controller's
// hands.
func (q *queue) hookCommand(h *TestHooks, r request) bool {
	if h.Command == nil {
		return true
	}
	v := h.Command(HookQueue{q}, r.SQE())
	switch v.Action {
	case HookFail:
		q.respond(r, v.Status)
	case HookHold:
		q.park(r)
	case HookDisconnect:
		q.park(r)
		q.close()
	default:
		return true
	}
	return false
}

// hookResponse runs the Response hook on a completion about to be sent.
func (q *queue) hookResponse(h *TestHooks, r request, st nvmeof.Status) nvmeof.Status {
	if h.Response == nil {
		return st
	}
	rsp := h.Response(HookQueue{q}, r.SQE(), HookResponse{Status: st})
	if rsp.SetResult {
		r.SetResult64(rsp.Result)
	}
	return rsp.Status
}
