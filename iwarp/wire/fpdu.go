package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// FPDU framing (RFC 5044 §4, without markers):
//
//	ULPDU_Length (2, BE) | ULPDU (DDP segment) | PAD (0-3) | CRC (4)
//
// ULPDU_Length excludes itself, the pad and the CRC. The pad makes
// 2 + ULPDU_Length + pad a multiple of 4. The CRC field is always present;
// it holds zeros when CRC was not negotiated.
const (
	// FPDULenFieldLen is the size of the ULPDU_Length field.
	FPDULenFieldLen = 2
	// CRCLen is the size of the trailing CRC field.
	CRCLen = 4
)

// castagnoli is the CRC-32C table (RFC 5044 §4.5 / RFC 3385); the standard
// library uses the SSE4.2 instruction for it when the CPU has one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PadLen is the number of pad bytes after a ULPDU of the given length.
func PadLen(ulpduLen int) int { return -(FPDULenFieldLen + ulpduLen) & 3 }

// FPDULen is the total wire size of an FPDU carrying a ULPDU of the given
// length: length field, ULPDU, pad and CRC.
func FPDULen(ulpduLen int) int {
	return FPDULenFieldLen + ulpduLen + PadLen(ulpduLen) + CRCLen
}

// ULPDULength reads the ULPDU_Length field at the start of an FPDU.
func ULPDULength(b []byte) int { return int(binary.BigEndian.Uint16(b)) }

// CRCUpdate extends a running CRC-32C with p. Start from 0; the value is
// finished (inverted) by crc32 itself, so CRCUpdate(CRCUpdate(0, a), b) equals
// the CRC of a followed by b.
func CRCUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// CRC computes the MPA CRC of the bytes it covers: the length field, the
// ULPDU and the pad (RFC 5044 §4.4).
func CRC(covered []byte) uint32 { return crc32.Checksum(covered, castagnoli) }

// PutCRC stores a CRC value in a CRC field the way Linux siw does:
// little-endian (siw writes ~crc with a little-endian store). A peer that
// followed the RFC's network order literally would not interoperate with
// siw; siw is the reference here.
func PutCRC(field []byte, crc uint32) { binary.LittleEndian.PutUint32(field, crc) }

// GetCRC reads a CRC field stored as PutCRC stores it.
func GetCRC(field []byte) uint32 { return binary.LittleEndian.Uint32(field) }

// zeroPad holds pad bytes for vectored writes.
var zeroPad [4]byte

// Pad returns a read-only slice of n zero bytes (n ≤ 3) for use as the pad
// in a vectored write. Callers must not modify it.
func Pad(n int) []byte { return zeroPad[:n] }
