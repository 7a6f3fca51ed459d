package backend

import (
	"errors"
	"io/fs"
	"strconv"
)

// Backend is the storage behind one NVMe namespace: a fixed-size array of
// logical blocks addressed in bytes.
//
// Contract shared by every method and every implementation:
//
//   - All methods are safe for concurrent use by any number of goroutines.
//     Calls whose ranges do not overlap are independent. Calls whose ranges
//     overlap and run concurrently have no defined order and no atomicity,
//     not even per block: a read racing a write may see old bytes, new
//     bytes, or a mix, and two racing writes may interleave. (The NVMe host
//     must not rely on ordering between outstanding commands either; a
//     target advertising AWUN/AWUPF must serialize overlapping writes
//     itself.)
//   - Offsets and lengths are in bytes and must be multiples of BlockSize;
//     otherwise the call fails with an error matching [ErrUnaligned]. A
//     range that is negative or extends past Size fails with an error
//     matching [ErrOutOfRange]. Both are *[RangeError]. Zero-length calls
//     succeed and do nothing (beyond the checks).
//   - Buffers passed to ReadAt and WriteAt may have any memory alignment;
//     Info().BufferAlign tells which alignment avoids a copy.
//     Implementations use the caller's buffer directly and must not retain
//     it after returning.
//   - After Close has returned, data methods fail with [ErrClosed]; Size,
//     BlockSize and Info keep returning the values they had.
//   - Failures of the underlying storage are returned as *[IOError], whose
//     Op says what failed (read → NVMe Unrecovered Read Error, write,
//     write-zeroes, discard or flush → Write Fault) and which wraps the
//     operating system's error (errors.Is(err, syscall.ENOSPC) works).
type Backend interface {
	// ReadAt reads exactly len(p) bytes starting at byte offset off into p.
	// It returns nil only if p was filled completely; on error the contents
	// of p are unspecified. Reading a range never written returns zeroes
	// (or, for the null backend, its pattern).
	ReadAt(p []byte, off int64) error

	// WriteAt writes all of p at byte offset off. It returns nil only if all
	// of p was written. If fua (NVMe Force Unit Access) is set, the data is
	// on stable media when WriteAt returns; otherwise it may sit in a
	// volatile cache until the next Flush. A read-only backend returns
	// [ErrReadOnly].
	WriteAt(p []byte, off int64, fua bool) error

	// Flush makes every write that completed before Flush was called
	// durable on stable media (fdatasync, NVMe Flush). Writes that run
	// concurrently with Flush may or may not be covered. On a read-only
	// backend, Flush succeeds and does nothing.
	Flush() error

	// WriteZeroes sets length bytes at off to zero, without the caller
	// transferring data. Afterwards the range reads as zeroes, always. If
	// deallocate is set the backend may also release the storage (NVMe
	// Write Zeroes with DEAC); if it is not set the backend may still
	// deallocate, since the read result is identical. Backends that cannot
	// offload zeroing write zero-filled buffers instead (Stats counts
	// this). A read-only backend returns [ErrReadOnly].
	WriteZeroes(off, length int64, deallocate bool) error

	// Discard deallocates length bytes at off (NVMe Dataset Management
	// with the deallocate attribute, TRIM). It is advisory: afterwards the
	// range reads as zeroes if Info().DiscardZeroes is true, and otherwise
	// returns unspecified data (old data, zeroes, or anything else). If
	// Info().Discard is false, Discard does nothing and returns
	// [ErrNotSupported]. A read-only backend returns [ErrReadOnly].
	Discard(off, length int64) error

	// Size returns the capacity in bytes, a multiple of BlockSize. It is
	// fixed when the backend is opened, except in backends that implement
	// [SizeNotifier] (rbd), whose storage can be resized from outside while
	// open: their Size follows it.
	Size() int64

	// BlockSize returns the logical block size in bytes: 512 or 4096.
	BlockSize() uint32

	// Info describes the backend: identity, geometry and capabilities. It
	// is computed when the backend is opened and does not change (Info().Size
	// is the size at open, even where Size follows a resize).
	Info() Info

	// Health returns device-reported health (the NVMe SMART / Health
	// Information log, or what can be derived from ATA SMART). When the
	// backend has no device health (files, memory, loop and virtual
	// devices) it returns Health{Available: false, Reason: ...} and a nil
	// error; a non-nil error means a device that should report health
	// failed to. Health may issue commands to the device and take
	// milliseconds; callers should cache or rate-limit it.
	Health() (Health, error)

	// Close releases the backend. It waits for calls in progress to finish;
	// later data calls return [ErrClosed]. Close does not flush: call Flush
	// first for durability. Closing more than once returns nil.
	Close() error
}

// Kind names a backend implementation.
type Kind string

// The backend kinds.
const (
	KindFile   Kind = "file"   // a regular file, see [OpenFile]
	KindBlock  Kind = "block"  // a block device, see [OpenBlock]
	KindNull   Kind = "null"   // discards writes, see [OpenNull]
	KindMemory Kind = "memory" // sparse RAM, see [OpenMemory]
	KindRBD    Kind = "rbd"    // a Ceph RBD image, see [RBDOptions] (needs the rbd build tag)
)

// SizeNotifier is implemented by backends whose capacity can change while
// they are open, because the storage is resized outside nvmetd (an RBD
// image grown or shrunk with `rbd resize`). The target watches it to update
// the namespace's size (NSZE, NCAP) and raise a Namespace Attribute Changed
// event (NVMe Base Specification 2.0, §5.27.1.19 and §5.16.1.5).
type SizeNotifier interface {
	// SizeChanged returns a channel that receives a value after Size has
	// changed. Notifications coalesce (the channel holds at most one), so a
	// receiver reads Size after each receive and acts on the value it finds,
	// which may equal the old one. The channel is the same on every call and
	// is closed by Close.
	SizeChanged() <-chan struct{}
}

// Info describes a backend. Fields that do not apply or are unknown are
// zero.
type Info struct {
	Kind Kind   // which implementation
	Path string // absolute path of the file or device node, as opened

	// Bus is the kind of block device ("nvme", "sata", "scsi", "virtio",
	// "loop", "dm", "md", "zram", "other"); empty for other backends.
	Bus string
	// Device identity from sysfs, trimmed; empty when the device does not
	// report it.
	Vendor, Model, Serial, Firmware, WWN string

	// ID is a stable identity of the storage, suitable to hash (with the
	// subsystem NQN) into an NGUID, EUI-64 or namespace UUID. It survives
	// restarts and device renumbering as long as the storage itself is the
	// same: for a file, its absolute path with symbolic links resolved; for
	// a block device its WWN, else model and serial, else a device-mapper
	// UUID or a loop device's backing file, else the device path; a
	// partition appends its number. It is arbitrary bytes in a string and
	// is empty for the null and memory backends, which have no identity of
	// their own.
	ID string

	Size              int64  // bytes, as Size()
	BlockSize         uint32 // logical block size, as BlockSize()
	PhysicalBlockSize uint32 // physical block size (>= BlockSize), 0 if unknown
	OptimalIOSize     uint32 // preferred I/O size in bytes, 0 if unknown

	// BufferAlign is the memory alignment of ReadAt/WriteAt buffers that
	// lets the backend do I/O on them directly (O_DIRECT). Misaligned
	// buffers still work, through a copy. 1 means any alignment.
	BufferAlign uint32

	ReadOnly   bool // writes fail with ErrReadOnly
	Direct     bool // I/O bypasses the page cache (O_DIRECT)
	Rotational bool // the underlying device is a spinning disk

	// VolatileCache reports that completed writes may be lost on power
	// failure until Flush (NVMe VWC). False for memory and null.
	VolatileCache bool
	// Discard reports that Discard deallocates (NVMe ONCS DSM, and thin
	// provisioning). When false, Discard returns ErrNotSupported.
	Discard bool
	// DiscardZeroes reports that a discarded range reads as zeroes (NVMe
	// DLFEAT read behaviour 001b). When false the contents are unspecified
	// (000b).
	DiscardZeroes bool
	// WriteZeroesOffload reports that WriteZeroes is done by the device or
	// file system without writing zero-filled buffers. WriteZeroes works
	// either way.
	WriteZeroesOffload bool
}

// Health is device-reported health, in the terms of the NVMe SMART / Health
// Information log page (NVMe Base Specification 2.0, §5.16.1.3). Counters
// wider than 64 bits saturate at the maximum uint64.
type Health struct {
	// Available is true when the device reported health. When false, only
	// Reason is meaningful.
	Available bool
	// Reason says why health is not available ("loop device: no
	// device-reported health"), or where it came from ("nvme smart log",
	// "ata smart").
	Reason string
	// Valid says which fields below hold device-reported values: HealthAll
	// (NVMe devices report every field), or the bits of the fields an ATA
	// device reported; a field without a bit of its own is valid only with
	// HealthAll.
	Valid HealthFields

	CriticalWarning         uint8  // bit set of CriticalWarning* values
	TemperatureKelvin       uint16 // composite temperature
	AvailableSpare          uint8  // percent
	AvailableSpareThreshold uint8  // percent
	PercentageUsed          uint8  // percent of rated endurance; may exceed 100
	DataUnitsRead           uint64 // thousands of 512-byte units
	DataUnitsWritten        uint64 // thousands of 512-byte units
	HostReadCommands        uint64
	HostWriteCommands       uint64
	ControllerBusyMinutes   uint64
	PowerCycles             uint64
	PowerOnHours            uint64
	UnsafeShutdowns         uint64
	MediaErrors             uint64 // unrecovered data integrity errors
	ErrorLogEntries         uint64
	WarningTempMinutes      uint32 // time above the warning threshold
	CriticalTempMinutes     uint32 // time above the critical threshold
}

// HealthFields is a bit set naming fields of [Health].
type HealthFields uint32

// The fields of [Health] that [Health.Valid] can name one by one: those an
// ATA device may report (NVMe devices report all, HealthAll).
const (
	HealthCriticalWarning HealthFields = 1 << iota
	HealthTemperature
	HealthAvailableSpare
	HealthAvailableSpareThreshold
	HealthPercentageUsed
	HealthPowerCycles
	HealthPowerOnHours
	HealthUnsafeShutdowns
	HealthMediaErrors

	// HealthAll is every field, as an NVMe SMART log reports.
	HealthAll = HealthCriticalWarning<<iota - 1
)

// Critical warning bits of [Health.CriticalWarning] (NVMe Base
// Specification 2.0, figure 207, byte 0).
const (
	CriticalWarningSpare          = 1 << 0 // available spare below threshold
	CriticalWarningTemperature    = 1 << 1 // temperature outside thresholds
	CriticalWarningReliability    = 1 << 2 // reliability degraded by media or internal errors
	CriticalWarningReadOnly       = 1 << 3 // media placed in read-only mode
	CriticalWarningVolatileBackup = 1 << 4 // volatile memory backup failed
)

// TemperatureCelsius returns the composite temperature in degrees Celsius.
func (h Health) TemperatureCelsius() int { return int(h.TemperatureKelvin) - 273 }

// Stats are counters of slow paths taken by a backend since it was opened.
type Stats struct {
	BounceReads   uint64 // ReadAt calls copied through an aligned buffer
	BounceWrites  uint64 // WriteAt calls copied through an aligned buffer
	ZeroFallbacks uint64 // WriteZeroes calls emulated by writing zeroes
	// NowaitDone counts TryReadAt/TryWriteAt calls served at once (page
	// cache); NowaitMissed those that would have had to wait.
	NowaitDone, NowaitMissed uint64
	// AllocatedBytes is the memory held by a memory backend.
	AllocatedBytes int64
}

// NowaitIO is implemented by backends that can try a read or a write
// without sleeping: a buffered file whose data is in the page cache (as
// nvmet's file backend tries IOCB_NOWAIT first). A caller that must not
// block (a queue's receive goroutine) tries here first and hands the
// command to a goroutine that may block only when done is false.
//
// done is false when the call would have had to wait (data not cached, a
// lock held, FUA, O_DIRECT, a file system without RWF_NOWAIT): nothing is
// reported and p may hold part of the data; the caller then uses ReadAt or
// WriteAt, which do the whole transfer. With done true, err is what ReadAt
// or WriteAt would have returned.
type NowaitIO interface {
	TryReadAt(p []byte, off int64) (done bool, err error)
	TryWriteAt(p []byte, off int64, fua bool) (done bool, err error)
}

// AsyncIO is implemented by backends that can start a read or a write
// without blocking the caller and report its end later (the rbd backend,
// on librbd's asynchronous API): the caller (a queue's engine goroutine)
// starts it and goes on, and no goroutine or OS thread waits for the
// operation.
//
// StartReadAt and StartWriteAt return false, having done nothing, when the
// backend cannot take the operation now (its cap on operations in flight is
// reached, or it is closing): the caller then uses ReadAt or WriteAt, which
// wait. With true, c.IODone is called exactly once, with what ReadAt or
// WriteAt would have returned, on another goroutine, or on the caller's
// before the Start call returns (a request refused at once: out of range,
// read-only, closed). p belongs to the backend until then: the caller must
// neither reuse it nor let it go before IODone. IODone must not block for
// long: the backend delivers other completions on the same goroutine.
type AsyncIO interface {
	StartReadAt(p []byte, off int64, c Completion) bool
	StartWriteAt(p []byte, off int64, fua bool, c Completion) bool
}

// Completion receives the outcome of an operation started through
// [AsyncIO].
type Completion interface {
	IODone(err error)
}

// HealthReporter is implemented by backends that can describe device health
// as human-readable text (the block backend, for SATA, SAS and NVMe disks).
type HealthReporter interface {
	HealthReport() (string, error)
}

// Errors that callers act on. Match them with errors.Is.
var (
	// ErrOutOfRange: an offset or length is negative or reaches past Size
	// (NVMe LBA Out of Range).
	ErrOutOfRange = errors.New("backend: range out of bounds")
	// ErrUnaligned: an offset or length is not a multiple of BlockSize
	// (NVMe Invalid Field in Command).
	ErrUnaligned = errors.New("backend: offset or length not a multiple of the block size")
	// ErrReadOnly: a write to a read-only backend (NVMe Namespace is Write
	// Protected).
	ErrReadOnly = errors.New("backend: read-only")
	// ErrNotSupported: the backend cannot do this operation at all (NVMe
	// Invalid Command Opcode, or success for advisory commands).
	ErrNotSupported = errors.New("backend: operation not supported")
	// ErrClosed: the backend was closed. It is fs.ErrClosed, so
	// errors.Is(err, os.ErrClosed) also matches.
	ErrClosed = fs.ErrClosed
	// ErrBusy: the file or device is in use by another opener (a lock or
	// O_EXCL conflict).
	ErrBusy = errors.New("backend: in use by another opener")
	// ErrUnavailable: the storage cannot be reached for now (the Ceph
	// cluster connection is lost, a cluster operation timed out, the
	// client was blocklisted). The same command may succeed through another
	// path (another gateway) or later, so the target answers with a path
	// error that hosts retry on another path (NVMe Internal Path Error).
	// Such errors also match ErrClosed, which the target already maps to
	// that status, and carry the cause (errors.Is(err, syscall.ETIMEDOUT)).
	ErrUnavailable error = unavailableError{}
)

type unavailableError struct{}

func (unavailableError) Error() string { return "backend: storage unavailable" }

// Is makes ErrUnavailable match ErrClosed: both mean that this path cannot
// serve the command now.
func (unavailableError) Is(target error) bool { return target == ErrClosed }

// Op names the operation that failed in an [IOError] or [RangeError].
type Op string

// Operations.
const (
	OpRead        Op = "read"
	OpWrite       Op = "write"
	OpFlush       Op = "flush"
	OpWriteZeroes Op = "write zeroes"
	OpDiscard     Op = "discard"
	OpClose       Op = "close"
)

// IsRead reports whether op reads data; errors of reads map to NVMe
// Unrecovered Read Error, all others to Write Fault.
func (op Op) IsRead() bool { return op == OpRead }

// IOError is a failure of the underlying storage.
type IOError struct {
	Kind Kind   // backend kind
	Path string // file or device
	Op   Op     // what failed
	Off  int64  // byte offset of the request (0 for flush)
	Len  int64  // byte length of the request (0 for flush)
	Err  error  // the cause, usually a syscall.Errno
}

func (e *IOError) Error() string {
	s := "backend " + string(e.Kind) + " " + e.Path + ": " + string(e.Op)
	if e.Op != OpFlush && e.Op != OpClose {
		s += " at " + strconv.FormatInt(e.Off, 10) + " length " + strconv.FormatInt(e.Len, 10)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *IOError) Unwrap() error { return e.Err }

// RangeError is a request outside the backend or not aligned to its blocks.
// It unwraps to [ErrOutOfRange] or [ErrUnaligned].
type RangeError struct {
	Op        Op
	Off       int64
	Len       int64
	Size      int64
	BlockSize uint32
	Err       error // ErrOutOfRange or ErrUnaligned
}

func (e *RangeError) Error() string {
	s := "backend: " + string(e.Op) + " at " + strconv.FormatInt(e.Off, 10) +
		" length " + strconv.FormatInt(e.Len, 10) + ": "
	if e.Err == ErrUnaligned {
		return s + "not a multiple of the block size " + strconv.FormatUint(uint64(e.BlockSize), 10)
	}
	return s + "outside the backend's " + strconv.FormatInt(e.Size, 10) + " bytes"
}

// Unwrap returns ErrOutOfRange or ErrUnaligned.
func (e *RangeError) Unwrap() error { return e.Err }

// CheckRange validates a request of length bytes at off against a backend of
// size bytes and block size bs (a power of two), as every Backend method
// must. It returns nil or a *RangeError. It is exported for implementations
// outside this package.
func CheckRange(op Op, off, length, size int64, bs uint32) error {
	if off < 0 || length < 0 || off > size || length > size-off {
		return &RangeError{Op: op, Off: off, Len: length, Size: size, BlockSize: bs, Err: ErrOutOfRange}
	}
	if (off|length)&int64(bs-1) != 0 {
		return &RangeError{Op: op, Off: off, Len: length, Size: size, BlockSize: bs, Err: ErrUnaligned}
	}
	return nil
}
