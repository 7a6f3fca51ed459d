package target

// GroupInFlight returns the number of commands that hold a namespace of
// ANA group group: received and not yet completed by the namespace's
// backend, whatever became of their host connection (a command keeps its
// namespace reference until its backend call returns, after its queue is
// gone). A gateway's hand-over waits for it to reach zero (after the group
// went inaccessible, so that it only falls), and for nothing of its other
// groups: their I/O goes on meanwhile. It does no I/O.
func (t *Target) GroupInFlight(group uint32) int64 {
	var n int64
	for _, sub := range t.s.subsystemList() {
		tab := sub.ns.Load()
		if tab == nil {
			continue
		}
		for _, ns := range tab.byID {
			if ns.cfg.ANAGroup == group {
				n += ns.inFlight()
			}
		}
	}
	return n
}

// inFlight is the number of command references on the namespace: its own
// count and its queues'.
func (ns *namespace) inFlight() int64 {
	n := ns.ref.Load() &^ refClosing
	ns.qrefsMu.Lock()
	for _, r := range ns.qrefs {
		n += r.n.Load()
	}
	ns.qrefsMu.Unlock()
	return n
}
