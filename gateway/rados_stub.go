//go:build !rbd

package gateway

import "time"

// Built says whether this build has the Ceph client libraries (the rbd
// build tag): without them a gateway cannot join its group.
const Built = false

// DialRADOS connects the gateway to the cluster. This build has no Ceph
// client libraries: it fails with ErrRADOSNotBuilt.
func DialRADOS(o RADOSOptions) (*RADOS, error) { return nil, ErrRADOSNotBuilt }

// RADOS is the Cluster on Ceph (only in builds with the rbd tag).
type RADOS struct{ Cluster }

// Close does nothing in this build.
func (r *RADOS) Close() {}

// ConfigChanged is never signalled in this build.
func (r *RADOS) ConfigChanged() <-chan struct{} { return nil }

// ReadGroupConfig fails in this build.
func (r *RADOS) ReadGroupConfig() (StoredConfig, error) { return StoredConfig{}, ErrRADOSNotBuilt }

// LoadGroupConfig fails in this build.
func (r *RADOS) LoadGroupConfig(seed []byte, canonical, legacy string) (StoredConfig, error) {
	return StoredConfig{}, ErrRADOSNotBuilt
}

// WriteGroupConfig fails in this build.
func (r *RADOS) WriteGroupConfig(base uint64, cfg []byte, agreement string) (uint64, error) {
	return 0, ErrRADOSNotBuilt
}

// SetRunning fails in this build.
func (r *RADOS) SetRunning(name string, v uint64) error { return ErrRADOSNotBuilt }

// Members fails in this build.
func (r *RADOS) Members() ([]Member, error) { return nil, ErrRADOSNotBuilt }

// SetMember does nothing in this build.
func (r *RADOS) SetMember(m *Member) {}

// SetPorts fails in this build.
func (r *RADOS) SetPorts(name string, ports []Port) (bool, error) { return false, ErrRADOSNotBuilt }

// RemovePorts fails in this build.
func (r *RADOS) RemovePorts(name string) error { return ErrRADOSNotBuilt }

// GroupPorts fails in this build.
func (r *RADOS) GroupPorts() (map[string][]Port, []string, error) { return nil, nil, ErrRADOSNotBuilt }

// WatchConfigObject fails in this build.
func (r *RADOS) WatchConfigObject() (bool, error) { return false, ErrRADOSNotBuilt }

// AliveMembers needs the Ceph client libraries.
func (r *RADOS) AliveMembers(time.Duration) (Liveness, error) { return Liveness{}, ErrRADOSNotBuilt }
