//go:build !rbd

package gateway

// DialRADOS connects the gateway to the cluster. This build has no Ceph
// client libraries: it fails with ErrRADOSNotBuilt.
func DialRADOS(o RADOSOptions) (*RADOS, error) { return nil, ErrRADOSNotBuilt }

// RADOS is the Cluster on Ceph (only in builds with the rbd tag).
type RADOS struct{ Cluster }

// Close does nothing in this build.
func (r *RADOS) Close() {}
