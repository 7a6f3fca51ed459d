//go:build !perfcount

package perfcount

import "sync"

// Enabled reports whether the package counts (the perfcount build tag).
const Enabled = false

// Mutex is sync.Mutex; under the perfcount tag, one that counts its
// acquisitions.
type Mutex = sync.Mutex

// RWMutex is sync.RWMutex; under the perfcount tag, one that counts its
// acquisitions.
type RWMutex = sync.RWMutex

// Begin marks the start of a measured window (perfcount tag only).
func Begin() {}

// End writes the counts since Begin (perfcount tag only); ios is the
// number of I/Os the window carried, for the report.
func End(ios uint64) {}
