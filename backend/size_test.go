package backend_test

import (
	"math"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64 // -1: error
	}{
		{"0", 0},
		{"4096", 4096},
		{"512B", 512},
		{"1K", 1 << 10},
		{"1k", 1 << 10},
		{"1KiB", 1 << 10},
		{"1kB", 1000},
		{"1G", 1 << 30},
		{"1g", 1 << 30},
		{"512MiB", 512 << 20},
		{"512 MiB", 512 << 20},
		{" 2T ", 2 << 40},
		{"10GB", 10e9},
		{"10gb", 10e9},
		{"1.5G", 3 << 29},
		{"0.5KiB", 512},
		{"7EiB", 7 << 60},
		{"8E", -1},    // overflows int64
		{"9.3EB", -1}, // overflows int64
		{"0.1K", -1},  // 102.4 bytes
		{"", -1},
		{"G", -1},
		{"-1G", -1},
		{"1.2.3M", -1},
		{"12 parsecs", -1},
		{"1GiBs", -1},
		{"99999999999999999999", -1},
	} {
		got, err := backend.ParseSize(c.in)
		if c.want < 0 {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0B"}, {1000, "1000B"}, {4096, "4KiB"}, {1 << 30, "1GiB"}, {3 << 29, "1536MiB"}, {1 << 40, "1TiB"}, {math.MaxInt64, "9223372036854775807B"},
	} {
		if got := backend.FormatSize(c.in); got != c.want {
			t.Errorf("FormatSize(%d) = %q, want %q", c.in, got, c.want)
		}
		if back, err := backend.ParseSize(backend.FormatSize(c.in)); err != nil || back != c.in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", c.in, back, err)
		}
	}
}
