// Package verify is the verified workload of the failover and multipath
// tests (test support only: no product package may import it; the
// archtest checks): versioned blocks, the last acknowledged sequence per
// block, a sweep of the whole device at the end. Its core is package
// vblock (every name below is vblock's); verify adds the Go host's
// multipath head as a PathDevice (Head), and cmd/vwriter is the same
// workload as a program for the Linux host of the interop lab.
package verify

import "github.com/nvmetd/nvmetd/internal/testing/verify/vblock"

// The workload, its record and its sweep: see package vblock.
type (
	Device     = vblock.Device
	PathDevice = vblock.PathDevice
	Aligner    = vblock.Aligner
	Config     = vblock.Config
	Workload   = vblock.Workload
	Stats      = vblock.Stats
	Report     = vblock.Report
	BadBlock   = vblock.BadBlock
	Summary    = vblock.Summary
	Gap        = vblock.Gap
	Direct     = vblock.Direct
)

// MinBlockSize is the smallest block the format fits in.
const MinBlockSize = vblock.MinBlockSize

var (
	// Start starts a workload on a Device.
	Start = vblock.Start
	// File adapts an open block device or file as a Device.
	File = vblock.File
	// OpenDirect opens a block device with O_DIRECT as a Device.
	OpenDirect = vblock.OpenDirect
	// LoadState reads a workload's record saved by Workload.SaveState.
	LoadState = vblock.LoadState
)
