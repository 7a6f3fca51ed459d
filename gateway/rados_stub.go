//go:build !rbd

package gateway

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
