package target

import (
	"errors"
	"syscall"

	"github.com/nvmetd/nvmetd/backend"
)

// BackendHealth is the cumulative outcome of the I/O of the namespaces of
// one ANA group on this target (counted since the target started, across
// reloads): a gateway samples it to see that its group's storage no longer
// serves it (its RADOS client blocklisted, or cut from the image's OSDs)
// while it still holds the group.
type BackendHealth struct {
	// Transferred counts the bytes of the reads and writes that
	// succeeded: it moves while any I/O completes.
	Transferred uint64
	// PathErrors counts the commands that failed because the storage
	// could not be reached (backend.ErrUnavailable: an operation timed
	// out, the cluster connection failed, the client was blocklisted).
	PathErrors uint64
	// Blocklisted counts those whose cause was EBLOCKLISTED (ESHUTDOWN):
	// a RADOS client of the group's backends was fenced, and will never
	// serve again.
	Blocklisted uint64
	// LastError is the last such failure ("" none).
	LastError string
	// Completed counts the commands whose backend work succeeded (reads,
	// writes, flushes, write zeroes, deallocations): it moves while the
	// group's storage serves anything.
	Completed uint64
	// Ended counts the commands whose backend work ended, in success or
	// failure.
	Ended uint64
	// InFlight is the number of the group's commands in the target now
	// (GroupInFlight): with Ended unchanged between two samples, each of
	// those in flight at the first has waited at least since then.
	InFlight int64
}

// notePathError counts a command of ns that failed with err, if err says
// that the storage cannot be reached (BackendHealth). Only failures pay
// for it.
func (ns *namespace) notePathError(err error) {
	if !errors.Is(err, backend.ErrUnavailable) {
		return
	}
	ns.pathErrors.Add(1)
	if errors.Is(err, syscall.ESHUTDOWN) {
		ns.blocklisted.Add(1)
	}
	s := err.Error()
	ns.lastPathError.Store(&s)
}

// BackendHealth returns the outcome of the I/O of the namespaces of ANA
// group group (every subsystem).
func (t *Target) BackendHealth(group uint32) BackendHealth {
	s := t.s
	var h BackendHealth
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	for _, sub := range s.subsystems {
		tab := sub.ns.Load()
		if tab == nil {
			continue
		}
		for _, ns := range tab.byID {
			if ns.cfg.ANAGroup != group || ns.nsCounters == nil {
				continue
			}
			h.Transferred += ns.readBytes.Load() + ns.writeBytes.Load()
			h.Completed += ns.succeeded.Load()
			h.Ended += ns.readCmds.Load() + ns.writeCmds.Load() + ns.otherCmds.Load()
			h.InFlight += ns.inFlight()
			h.PathErrors += ns.pathErrors.Load()
			h.Blocklisted += ns.blocklisted.Load()
			if e := ns.lastPathError.Load(); e != nil {
				h.LastError = *e
			}
		}
	}
	return h
}
