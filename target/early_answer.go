package target

import (
	"fmt"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// A command in a backend call (command.io) is answered by whoever moves it
// out of ioRun first: its backend's return (finishIO: the usual answer) or
// AnswerGroupInFlight (an early ANA answer, the context and data buffer
// kept until the backend returns). The phases, in the low bits of
// command.io; the ANA group of the command's namespace is above them, so
// that a compare-and-swap names the command's group as well as its phase.
const (
	ioIdle      uint32 = iota // not in a backend call
	ioRun                     // in its backend call
	ioAnswering               // being answered early
	ioAnswered                // answered early: its backend's return releases it
	ioDone                    // its backend returned while it was being answered early

	ioPhaseMask  = 7
	ioGroupShift = 3
)

// enterBackend marks an NVM command as in its backend call (c.ns set).
func (c *command) enterBackend() {
	c.io.Store(c.ns.cfg.ANAGroup<<ioGroupShift | ioRun)
}

// finishIO answers a command whose backend call returned with st (its
// namespace reference and controller I/O count already put), unless it was
// answered early: then it releases the context and buffer it kept.
func (q *queue) finishIO(c *command, r request, st nvmeof.Status, now time.Time) {
	g := c.io.Load() &^ ioPhaseMask
	if c.io.CompareAndSwap(g|ioRun, ioIdle) {
		q.respondAt(r, st, now)
		return
	}
	c.doneSt, c.doneAt = st, now
	if c.io.CompareAndSwap(g|ioAnswering, g|ioDone) {
		return // the early answer ends it (answerGroup)
	}
	q.releaseAnswered(c, r)
}

// releaseAnswered ends a command answered early once its backend returned:
// the binding frees its context and data buffer.
func (q *queue) releaseAnswered(c *command, r request) {
	c.ns = nil
	c.io.Store(ioIdle)
	q.inflight.Add(-1)
	r.Release()
}

// answerGroup answers the queue's commands of ANA group group that are in
// their backend call with st at once; it returns how many.
func (q *queue) answerGroup(group uint32, st nvmeof.Status) int {
	run, answering := group<<ioGroupShift|ioRun, group<<ioGroupShift|ioAnswering
	n := 0
	for i := range q.cmds {
		c := &q.cmds[i]
		if !c.io.CompareAndSwap(run, answering) {
			continue
		}
		// The command is ours to answer: its backend's return does not
		// answer or release it now (finishIO).
		r := c.r
		ans := st
		if ctrl := q.ctrl.Load(); ctrl != nil {
			ans = ctrl.logError(q.qid, r.SQE(), st) // an error log entry, as respondAt's
		}
		if !r.Answer(ans) {
			// The binding refused (answered already: not expected):
			// the backend's return answers it.
			if !c.io.CompareAndSwap(answering, run) {
				c.io.Store(ioIdle)
				q.respondAt(r, c.doneSt, c.doneAt)
			}
			continue
		}
		q.met.record(classifyOp(q.qid, r.SQE()), classifyStatus(ans), 0, 0, false)
		n++
		if !c.io.CompareAndSwap(answering, group<<ioGroupShift|ioAnswered) {
			q.releaseAnswered(c, r) // the backend returned meanwhile
		}
	}
	return n
}

// AnswerGroupInFlight answers, at once, every command of ANA group group
// that is still in its backend call (an rbd write stuck in librbd on an
// OSD out of reach can stay there up to its op timeout) with Asymmetric
// Access Inaccessible: the status NVMe Base 2.0 §8.20.3.3 gives a command
// on a namespace that is inaccessible through the controller, a path error
// (SCT 3h) on which a Linux host fails the I/O over to another path
// (nvme_failover_req) after it reads the ANA log. Each such command's
// context and data buffer stay held until its backend returns (the backend
// still reads or fills the buffer), then they are freed; GroupInFlight
// counts it until then (over RDMA a command whose data came in its capsule
// keeps its receive buffer, and the slot gets a spare). It returns how
// many were answered.
//
// The group must be inaccessible (or in persistent loss) on every port
// (SetGroupANA), so that the host's retry cannot come back here. Answering
// a write early tells the host it did not happen while it may still land:
// that is safe only when it can no longer land after a newer write of the
// same blocks, that is, when this gateway's RADOS clients of the group are
// fenced (blocklisted, and the next owner waits for the OSD map that says
// so before it serves: docs/rbd.md, "Why blocklist before serving") or
// were blocklisted already. The caller (the gateway, on a backend
// step-down or a fenced exit) makes sure of it; a graceful hand-over whose
// backend is healthy drains instead.
func (t *Target) AnswerGroupInFlight(group uint32) (int, error) {
	s := t.s
	if group < 1 || group > MaxANAGroup {
		return 0, fmt.Errorf("target: ANA group %d out of range (1..%d)", group, MaxANAGroup)
	}
	if f := s.anaForced.Load(); f == nil {
		return 0, fmt.Errorf("target: ANA group %d: answering its commands early needs it inaccessible (SetGroupANA)", group)
	} else if st, ok := (*f)[group]; !ok || (st != nvmeof.ANAInaccessible && st != nvmeof.ANAPersistentLoss) {
		return 0, fmt.Errorf("target: ANA group %d is %v: answering its commands early needs it inaccessible", group, st)
	}
	n := 0
	for _, c := range s.allControllers() {
		c.mu.Lock()
		qs := make([]*queue, 0, len(c.queues))
		for _, q := range c.queues[min(1, len(c.queues)):] {
			if q != nil {
				qs = append(qs, q)
			}
		}
		c.mu.Unlock()
		for _, q := range qs {
			n += q.answerGroup(group, nvmeof.StatusANAInaccessible)
		}
	}
	return n, nil
}
