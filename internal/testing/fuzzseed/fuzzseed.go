// Package fuzzseed keeps the seed corpora of go test -fuzz targets as files,
// testdata/fuzz/<FuzzName>/seed-NN in the "go test fuzz v1" format, for the
// tests of the packages that have fuzz targets.
package fuzzseed

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Sync writes seeds (fuzz target name → inputs, each the argument list of
// one f.Add) under testdata/fuzz when update is set; otherwise it fails t
// for every target without a seed directory. The values may be []byte,
// string, uint8 or uint16.
func Sync(t testing.TB, update bool, seeds map[string][][]any) {
	t.Helper()
	for name, inputs := range seeds {
		dir := filepath.Join("testdata", "fuzz", name)
		if !update {
			if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
				t.Errorf("%s: no seed corpus (%v); run go test -run %s -update", dir, err, t.Name())
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			var b bytes.Buffer
			b.WriteString("go test fuzz v1\n")
			for _, v := range in {
				switch v := v.(type) {
				case []byte:
					fmt.Fprintf(&b, "[]byte(%q)\n", v)
				case string:
					fmt.Fprintf(&b, "string(%q)\n", v)
				case uint8:
					fmt.Fprintf(&b, "byte(%q)\n", v)
				case uint16:
					fmt.Fprintf(&b, "uint16(%d)\n", v)
				default:
					t.Fatalf("fuzzseed: %s: a %T seed", name, v)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
