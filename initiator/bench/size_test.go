package bench

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4k": 4096, "128K": 131072, "1m": 1 << 20, "2G": 2 << 30, "64KiB": 65536, "0": 0} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "k", "-1", "1x"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
