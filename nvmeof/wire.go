package nvmeof

import (
	"bytes"
	"encoding/binary"
	"math/big"
)

// le is the byte order of every NVMe field.
var le = binary.LittleEndian

// Uint128 is an unsigned 128-bit little-endian counter as used by the SMART
// log and the NVM capacity fields.
type Uint128 struct {
	Lo, Hi uint64
}

// U128 returns v as a Uint128.
func U128(v uint64) Uint128 { return Uint128{Lo: v} }

// uint64 returns the value and whether it fits in 64 bits.
func (u Uint128) uint64() (uint64, bool) { return u.Lo, u.Hi == 0 }

// Big returns the value as a big.Int.
func (u Uint128) Big() *big.Int {
	b := new(big.Int).SetUint64(u.Hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(u.Lo))
}

// String returns the decimal value.
func (u Uint128) String() string { return u.Big().String() }

func getU128(b []byte) Uint128 { return Uint128{Lo: le.Uint64(b), Hi: le.Uint64(b[8:])} }

func putU128(b []byte, u Uint128) {
	le.PutUint64(b, u.Lo)
	le.PutUint64(b[8:], u.Hi)
}

// paddedString returns f up to the first NUL with trailing spaces removed:
// the reading of space-padded ASCII fields (SN, MN, FR) and of fields that
// are NUL- or space-padded (TRSVCID, TRADDR; libnvme trims both).
func paddedString(f []byte) string {
	if n := bytes.IndexByte(f, 0); n >= 0 {
		f = f[:n]
	}
	return string(bytes.TrimRight(f, " "))
}

// putPadded copies s into f, truncated to len(f), and fills the rest with pad.
func putPadded(f []byte, s string, pad byte) {
	n := copy(f, s)
	for i := n; i < len(f); i++ {
		f[i] = pad
	}
}
