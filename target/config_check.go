package target

import (
	"errors"
	"fmt"

	"github.com/nvmetd/nvmetd/backend"
)

// This file checks a configuration against the machine: what Validate
// cannot see without touching the file system.

// MemoryBackendShare is the share of the machine's physical memory that the
// memory namespaces of a configuration may take together (their full size:
// hosts can write every byte): three quarters, leaving the rest to the
// daemon, its buffers and the system.
const MemoryBackendShare = 0.75

// Check checks what the target would open for c (as ApplyDefaults would
// complete it; c is not modified), without creating, writing or locking
// anything: the file or block device of every enabled namespace
// (backend.Config.Check: paths, device types, sizes against the file or
// device), the memory namespaces together against MemoryBackendShare of
// the physical memory, and the hosts' DH-HMAC-CHAP key files (present,
// private, holding a secret). It returns nil or a *ValidationError whose problems
// name the field ("subsystems[0].namespaces[1].backend.path"). Call it on a
// configuration that Validate accepts.
func (c *Config) Check() error {
	d := c.Clone()
	d.ApplyDefaults()
	var v validator
	type mem struct {
		field string
		size  int64
	}
	var mems []mem
	var memTotal int64
	for i := range d.Subsystems {
		s := &d.Subsystems[i]
		for j := range s.Namespaces {
			n := &s.Namespaces[j]
			if !n.IsEnabled() {
				continue
			}
			np := fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j)
			if fe := n.check(); fe != nil {
				fe.Field = np + "." + fe.Field
				v.problems = append(v.problems, fe)
				continue
			}
			if bc, err := n.BackendConfig(); err == nil && bc.Kind == backend.KindMemory {
				mems = append(mems, mem{np + ".backend.size", bc.Size})
				memTotal += backend.MemoryFootprint(bc.Size)
			}
		}
	}
	if phys := backend.PhysicalMemory(); phys > 0 && len(mems) > 0 {
		limit := int64(float64(phys) * MemoryBackendShare)
		for _, m := range mems {
			if backend.MemoryFootprint(m.size) > limit {
				v.add(m.field, "%s is more than %s, three quarters of this machine's physical memory (%s), which a memory namespace may take once hosts write it",
					backend.FormatSize(m.size), humanSize(limit), humanSize(phys))
				memTotal = 0 // reported; the total adds nothing
			}
		}
		if memTotal > limit {
			v.add(mems[len(mems)-1].field, "the memory namespaces together take %s, more than %s, three quarters of this machine's physical memory (%s)",
				humanSize(memTotal), humanSize(limit), humanSize(phys))
		}
	}
	// The hosts' key files: readable, private, holding a secret.
	if _, err := loadAuthKeys(d); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			v.problems = append(v.problems, ve.Problems...)
		}
	}
	d.Metrics.check(&v, "metrics")
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

// check checks the namespace's storage (backend.Config.Check), returning
// the problem with its field relative to the namespace ("backend.path"),
// or nil.
func (n *NamespaceConfig) check() *FieldError {
	bc, err := n.BackendConfig()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return &FieldError{Field: "backend." + fe.Field, Reason: fe.Reason, Err: fe.Err}
		}
		return &FieldError{Field: "backend", Reason: err.Error(), Err: err}
	}
	if err := bc.Check(); err != nil {
		var ce *backend.ConfigError
		if errors.As(err, &ce) {
			return &FieldError{Field: "backend." + ce.Field, Reason: ce.Reason, Err: err}
		}
		return &FieldError{Field: "backend", Reason: err.Error(), Err: err}
	}
	return nil
}

// humanSize formats a byte count with one decimal in the largest binary
// unit: "17.6GiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
