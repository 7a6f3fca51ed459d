package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// castagnoli is the CRC32C table of header and data digests (TCP 1.0
// §3.6.1: CRC-32C, stored little-endian as Linux writes it).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HeaderDigest is the digest of a PDU header (its HLEN bytes).
func HeaderDigest(hdr []byte) uint32 { return crc32.Checksum(hdr, castagnoli) }

// DataDigest continues a data digest over b: start with 0, feed each piece
// of the PDU's data in order.
func DataDigest(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// PutDigest stores a digest in its 4 bytes.
func PutDigest(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }

// GetDigest reads a digest from its 4 bytes.
func GetDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// CheckHeaderDigest checks the header digest that follows the HLEN header
// bytes at the start of pdu (at least HLEN + 4 bytes): a mismatch is the
// fatal FESHeaderDigestError (TCP 1.0 §3.6.2.1).
func CheckHeaderDigest(pdu []byte, h Header) error {
	n := int(h.HLen)
	got, want := GetDigest(pdu[n:]), HeaderDigest(pdu[:n])
	if got != want {
		return fatal(h.Type, FESHeaderDigestError, 0, "header digest %#08x, computed %#08x", got, want)
	}
	return nil
}
