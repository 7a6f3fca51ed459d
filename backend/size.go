package backend

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-cased unit suffix to its multiplier. The
// convention is GNU coreutils' (truncate -s, dd): a bare letter and the
// "iB" forms are powers of 1024, the "B" forms are powers of 1000.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
	"e": 1 << 60, "eib": 1 << 60, "eb": 1e18,
}

// ParseSize parses a byte count such as "4096", "512MiB", "1G" or "10GB".
//
// Units (case-insensitive, optionally separated from the number by spaces)
// follow GNU coreutils: K, M, G, T, P, E and KiB ... EiB are powers of 1024
// ("1G" = "1GiB" = 1073741824); KB, MB, GB, TB, PB, EB are powers of 1000
// ("10GB" = 10000000000); B or no unit means bytes. The number may have a
// decimal fraction ("1.5G") if the result is a whole number of bytes. The
// result must fit in an int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("backend: size %q: want a number and an optional unit such as 512MiB or 10GB", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("backend: size %q: unknown unit %q (want K, M, G, T, P, E, their KiB or KB forms, or B)", s, t[i:])
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("backend: size %q: too large", s)
		}
		return n * mult, nil
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("backend: size %q: bad number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("backend: size %q: not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("backend: size %q: too large", s)
	}
	return r.Num().Int64(), nil
}

// FormatSize formats n bytes exactly, with the largest binary unit that
// divides it: 1073741824 → "1GiB", 4096 → "4KiB". It never rounds, so
// 1000 → "1000B". ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	units := [...]string{"EiB", "PiB", "TiB", "GiB", "MiB", "KiB"}
	if n != 0 {
		for i, u := range units {
			m := int64(1) << (10 * (len(units) - i))
			if n%m == 0 {
				return strconv.FormatInt(n/m, 10) + u
			}
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
