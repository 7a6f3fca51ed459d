package vblock

import (
	"encoding/binary"
	"hash/crc32"
)

// The layout of a block the workload writes (little endian):
//
//	0   magic "nvmetdV1" (the format's version is in it)
//	8   run: random per Workload, so blocks of an earlier run are foreign
//	16  block number (in blocks of the workload's block size)
//	24  sequence of the write (per block, it only grows)
//	32  writer: the worker that wrote it
//	36  the block size, so a block read at another size is foreign
//	40  fill, derived from (run, block, sequence): two versions of a block
//	    differ in every 512-byte sector, so a torn write never passes
//	B-4 CRC-32C of bytes 0..B-4
const (
	hdrMagic  = 0
	hdrRun    = 8
	hdrBlock  = 16
	hdrSeq    = 24
	hdrWriter = 32
	hdrSize   = 36
	hdrFill   = 40

	// MinBlockSize is the smallest block the format fits in.
	MinBlockSize = 64
)

var (
	magic      = [8]byte{'n', 'v', 'm', 'e', 't', 'd', 'V', '1'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// stamp is what one block holds.
type stamp struct {
	run, block, seq uint64
	writer          uint32
}

// fill writes the block for s into b (len(b) is the block size).
func (s stamp) fill(b []byte) {
	copy(b[hdrMagic:], magic[:])
	binary.LittleEndian.PutUint64(b[hdrRun:], s.run)
	binary.LittleEndian.PutUint64(b[hdrBlock:], s.block)
	binary.LittleEndian.PutUint64(b[hdrSeq:], s.seq)
	binary.LittleEndian.PutUint32(b[hdrWriter:], s.writer)
	binary.LittleEndian.PutUint32(b[hdrSize:], uint32(len(b)))
	// xorshift64 seeded by the stamp: cheap, and different per version.
	x := s.run ^ s.block*0x9e3779b97f4a7c15 ^ s.seq*0xbf58476d1ce4e5b9 | 1
	end := len(b) - 4
	i := hdrFill
	for ; i+8 <= end; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	for ; i < end; i++ {
		b[i] = byte(x >> (8 * (i & 7)))
	}
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
}

// blockKind is what a block read back is.
type blockKind uint8

const (
	kindOurs    blockKind = iota // a whole block of this run, stamp valid
	kindNotOurs                  // no magic, or another run or block size: never written by this run
	kindTorn                     // this run's magic and run, wrong checksum: parts of several writes
)

// parse reads the stamp of block b written by run.
func parse(b []byte, run uint64) (stamp, blockKind) {
	if [8]byte(b[hdrMagic:hdrMagic+8]) != magic || binary.LittleEndian.Uint64(b[hdrRun:]) != run {
		return stamp{}, kindNotOurs
	}
	end := len(b) - 4
	if binary.LittleEndian.Uint32(b[end:]) != crc32.Checksum(b[:end], castagnoli) ||
		binary.LittleEndian.Uint32(b[hdrSize:]) != uint32(len(b)) {
		return stamp{}, kindTorn
	}
	return stamp{
		run:    run,
		block:  binary.LittleEndian.Uint64(b[hdrBlock:]),
		seq:    binary.LittleEndian.Uint64(b[hdrSeq:]),
		writer: binary.LittleEndian.Uint32(b[hdrWriter:]),
	}, kindOurs
}
