package backend

import (
	"sync"
	"sync/atomic"
)

// MemoryChunkSize is the allocation unit of the memory backend: a chunk is
// allocated on its first write and freed when a WriteZeroes or Discard
// covers it whole.
const MemoryChunkSize = 1 << 20

type memChunk [MemoryChunkSize]byte

// MemoryOptions configures [OpenMemory].
type MemoryOptions struct {
	Size      int64  // capacity in bytes; a positive multiple of BlockSize
	BlockSize uint32 // 512 (default when 0) or 4096
	ReadOnly  bool   // writes fail with ErrReadOnly (the backend stays all zeroes)
}

// Memory is a sparse RAM-backed backend. It costs 8 bytes per MiB of
// capacity for the chunk table plus 1 MiB per chunk written, so a 1 TiB
// namespace needs 8 MiB until it is written. Contents are lost on Close.
// There is no limit on the memory it takes other than Size.
//
// Chunks are reached through atomic pointers: a chunk is installed with
// compare-and-swap by the first writer, and freed by swapping in nil. Each
// chunk's bytes are guarded by a reader/writer lock of their own, held only
// for the copy, so that a host's overlapping reads and writes (which NVMe
// leaves unordered, as every [Backend] does) are not data races of this
// process: requests to different chunks never wait for each other, reads of
// one chunk run in parallel, and a write of one chunk is never seen half
// done by a read of that chunk.
type Memory struct {
	ram
	allocated atomic.Int64
	chunks    []atomic.Pointer[memChunk]
	locks     []sync.RWMutex // locks[i] guards the bytes of chunks[i]
}

var _ Backend = (*Memory)(nil)

// OpenMemory returns an empty (all zeroes) memory backend.
func OpenMemory(opts MemoryOptions) (*Memory, error) {
	m := &Memory{}
	if err := m.init(opts.Size, opts.BlockSize, opts.ReadOnly); err != nil {
		return nil, err
	}
	n := (opts.Size + MemoryChunkSize - 1) / MemoryChunkSize
	// Refuse a chunk table this machine could not hold, rather than die in
	// its allocation (a fatal error, not a panic). The chunks themselves
	// are allocated as hosts write: the target's configuration check
	// bounds the whole size by the physical memory.
	if phys := PhysicalMemory(); phys > 0 && n*memoryChunkOverhead > phys/4 {
		return nil, cfgErr("size", "%s needs a chunk table of %s, more than a quarter of this machine's physical memory (%s)",
			FormatSize(opts.Size), FormatSize(n*memoryChunkOverhead), FormatSize(phys))
	}
	m.chunks = make([]atomic.Pointer[memChunk], n)
	m.locks = make([]sync.RWMutex, n)
	return m, nil
}

// ReadAt copies from the written chunks into p and zeroes the rest. See
// [Backend].
func (m *Memory) ReadAt(p []byte, off int64) error {
	if err := m.checkRead(off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		i, o := off/MemoryChunkSize, int(off%MemoryChunkSize)
		n := min(len(p), MemoryChunkSize-o)
		m.locks[i].RLock()
		if c := m.chunks[i].Load(); c != nil {
			copy(p[:n], c[o:])
		} else {
			clear(p[:n])
		}
		m.locks[i].RUnlock()
		p = p[n:]
		off += int64(n)
	}
	return nil
}

// WriteAt copies p into the chunks, allocating those not yet written. FUA
// is meaningless for RAM and ignored. See [Backend].
func (m *Memory) WriteAt(p []byte, off int64, fua bool) error {
	if err := m.check(OpWrite, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		i, o := off/MemoryChunkSize, int(off%MemoryChunkSize)
		n := min(len(p), MemoryChunkSize-o)
		c := m.chunks[i].Load()
		for c == nil {
			nc := new(memChunk)
			if m.chunks[i].CompareAndSwap(nil, nc) {
				m.allocated.Add(MemoryChunkSize)
				c = nc
			} else {
				c = m.chunks[i].Load() // lost the race; a Discard may free it again
			}
		}
		m.locks[i].Lock()
		copy(c[o:o+n], p)
		m.locks[i].Unlock()
		p = p[n:]
		off += int64(n)
	}
	return nil
}

// WriteZeroes frees the chunks the range covers whole and zeroes the
// written parts of the others. See [Backend].
func (m *Memory) WriteZeroes(off, length int64, deallocate bool) error {
	if err := m.check(OpWriteZeroes, off, length); err != nil {
		return err
	}
	m.zero(off, length)
	return nil
}

// Discard is WriteZeroes: discarded ranges read as zeroes. See [Backend].
func (m *Memory) Discard(off, length int64) error {
	if err := m.check(OpDiscard, off, length); err != nil {
		return err
	}
	m.zero(off, length)
	return nil
}

func (m *Memory) zero(off, length int64) {
	for length > 0 {
		i, o := off/MemoryChunkSize, off%MemoryChunkSize
		n := min(length, MemoryChunkSize-o)
		if o == 0 && (n == MemoryChunkSize || off+n == m.size) {
			if m.chunks[i].Swap(nil) != nil {
				m.allocated.Add(-MemoryChunkSize)
			}
		} else if c := m.chunks[i].Load(); c != nil {
			m.locks[i].Lock()
			clear(c[o : o+n])
			m.locks[i].Unlock()
		}
		off += n
		length -= n
	}
}

// Info describes the memory backend.
func (m *Memory) Info() Info {
	return Info{
		Kind: KindMemory, Size: m.size, BlockSize: m.bs, PhysicalBlockSize: m.bs,
		OptimalIOSize: MemoryChunkSize, BufferAlign: 1, ReadOnly: m.ro,
		Discard: true, DiscardZeroes: true, WriteZeroesOffload: true,
	}
}

// Health reports that RAM has no device health.
func (m *Memory) Health() (Health, error) {
	return Health{Reason: "memory backend: no device-reported health"}, nil
}

// Stats reports the memory held in AllocatedBytes.
func (m *Memory) Stats() Stats {
	return Stats{AllocatedBytes: m.allocated.Load()}
}

// Close frees all chunks. Calls in progress finish on the chunks they hold.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	for i := range m.chunks {
		if m.chunks[i].Swap(nil) != nil {
			m.allocated.Add(-MemoryChunkSize)
		}
	}
	return nil
}
