// Package backend is the storage behind NVMe namespaces: the [Backend]
// interface and five implementations.
//
//   - [File] (kind "file"): a regular file, created sparse if missing.
//   - [Block] (kind "block"): a block device, always O_DIRECT, with device
//     identity from sysfs and device health from NVMe or ATA SMART.
//   - [Null] (kind "null"): discards writes and reads zeroes, for
//     benchmarks.
//   - [Memory] (kind "memory"): sparse RAM in 1 MiB chunks.
//   - RBD (kind "rbd"): a Ceph RBD image through librbd (go-ceph), with
//     cgo, only in builds with the rbd tag ([RBDBuildTag]); see
//     [RBDOptions] and docs/rbd.md. It implements [SizeNotifier] (images
//     resized while open) and [CephClient], and reports a lost cluster
//     with [ErrUnavailable].
//
// [Open] builds any of them from a [Config]; [ParseSize] reads sizes such
// as "512MiB" or "10GB" for it.
//
// The package knows nothing of NVMe transport; it speaks bytes, offsets and
// Go errors. The target maps them: *[RangeError] with [ErrOutOfRange] to LBA
// Out of Range and with [ErrUnaligned] to Invalid Field, [ErrReadOnly] to
// Namespace is Write Protected, *[IOError] to Unrecovered Read Error (Op
// read) or Write Fault (the others), [ErrNotSupported] to Invalid Command
// Opcode (or success for advisory deallocation), [ErrClosed] and
// [ErrUnavailable] (which matches ErrClosed) to Internal Path Error, which
// hosts retry on another path; [Info] feeds Identify
// Namespace (NSFEAT, DLFEAT, NPWG/NOWS, VWC, NGUID from Info.ID) and
// [Health] the SMART / Health log page.
//
// # Data path
//
// ReadAt and WriteAt work on the caller's buffer without copying (pread and
// pwrite; memcpy for memory), and allocate nothing in steady state. The
// only copy is the O_DIRECT fallback for buffers that are not aligned to
// Info().BufferAlign, through pooled page-aligned bounce buffers; it is
// counted in [Stats]. The target's registered buffers are page-aligned
// (unix.Mmap), so they never take it.
//
// The package is Linux-only: it uses pwritev2, fallocate, block device
// ioctls, statx and sysfs. Only the rbd kind needs cgo and C libraries
// (librbd, librados).
package backend
