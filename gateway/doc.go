// Package gateway keeps the ownership of ANA groups in a group of nvmetd
// gateways that serve the same subsystems and Ceph RBD namespaces (issue
// 16, docs/rbd.md "Gateway group").
//
// Each ANA group has a RADOS object in the pool; its owner holds an
// exclusive cls_lock on it for a lease and renews it. The owner reports
// the group optimized on its ports, every other gateway inaccessible
// (Linux fails over to, and back from, inaccessible paths; NVMe 2.0 §8.1.3).
// When the owner stops renewing, a survivor first fences it (blocklists,
// for years, every RADOS client address in the owner's record of the
// group: the clients of that group's namespaces only, so that the owner's
// other groups go on), makes its own clients of the group wait for the
// latest OSD map, and only then takes the lock and goes optimized. The
// preferred owner of a group gets it back after FailbackDelay by a
// graceful handover (the holder goes inaccessible, flushes, marks the
// record released and unlocks), and fences the holder's clients of the
// group all the same: a drain cannot see every write in flight. Records
// carry an epoch and are written under the lock (cls_lock assert_locked);
// a record that disappears makes its last known holder fenced.
//
// [Machine] is the logic, a pure state machine; [Runner] drives it with a
// [Cluster] (the RADOS implementation, [DialRADOS], needs the rbd build
// tag and cgo) and applies the ANA states through a [Applier].
package gateway
