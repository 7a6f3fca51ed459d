package gateway

// Maintenance and moves through the group's configuration (docs/rbd.md
// "Maintenance: drain and rolling upgrade"): the group's configuration
// (held in RADOS, versioned) names each ANA group's preferred owner and
// the drained members; every gateway applies each version to its machine
// with SetPreferred and SetDrained. Neither is a second way to serve: a
// move is the failback path, a drain the release path.
//
//   - A new preferred owner of a group held by another gateway asks for it
//     with a handover request once its failback rules allow (failback.go);
//     the holder honours a request only from the preferred owner it knows,
//     so the move happens once both applied the version (the holder reads
//     the request at each renewal: one that came first is honoured then).
//   - A drained gateway is never a group's owner: each group it owns goes
//     inaccessible here and, once that applied, is released to nobody
//     (graceful: the group's commands drained, the record marked released),
//     so that the first live member to read it fences this gateway's
//     clients of the group and takes it, as after a clean stop. While
//     drained it acquires nothing, fences nothing and asks for nothing;
//     undrained, its failback rules bring its preferred groups back.

// SetPreferred sets the preferred owner of group id (a version of the
// group's configuration changed it). Unknown groups are ignored.
func (m *Machine) SetPreferred(id uint32, name string) {
	if g := m.group(id); g != nil && name != "" {
		g.preferred = name
	}
}

// SetDrained sets whether this gateway is drained.
func (m *Machine) SetDrained(drained bool) { m.drained = drained }

// Drained reports whether this gateway is drained.
func (m *Machine) Drained() bool { return m.drained }

// drain starts the release of group g, owned here, to nobody once this
// gateway is drained: inaccessible here first, then (maybeRelease) the
// release, as a failback's.
func (m *Machine) drain(acts []Action, g *group) []Action {
	if !m.drained || g.role != Owner || g.releasing {
		return acts
	}
	g.releasing, g.releaseTo = true, ""
	return m.setANA(acts, g, false)
}
