package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the autoconnect golden files")

// TestAutoconnectParsers parses a discovery.conf and a config.json written
// from nvme-cli's and libnvme's documented formats (nvme-cli's
// discovery.conf example, libnvme's config-schema.json) and compares the
// connections and notes with golden files.
func TestAutoconnectParsers(t *testing.T) {
	for _, c := range []struct {
		file  string
		parse func(string, *os.File) ([]autoconnectEntry, []string, error)
	}{
		{"discovery.conf", func(n string, f *os.File) ([]autoconnectEntry, []string, error) { return parseDiscoveryConf(n, f) }},
		{"config.json", func(n string, f *os.File) ([]autoconnectEntry, []string, error) { return parseConfigJSON(n, f) }},
	} {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "autoconnect", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			entries, notes, err := c.parse(c.file, f)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(struct {
				Entries []autoconnectEntry `json:"entries"`
				Notes   []string           `json:"notes"`
			}{entries, notes}, "", "  ")
			got = append(got, '\n')
			golden := filepath.Join("testdata", "autoconnect", c.file+".golden")
			if *updateGolden {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%s:\n%s\nwant:\n%s", c.file, got, want)
			}
		})
	}
}

// TestAutoconnectParseErrors: a malformed config.json is an error naming
// the file; a missing file is none.
func TestAutoconnectParseErrors(t *testing.T) {
	if _, _, err := parseConfigJSON("bad.json", strings.NewReader(`{"hostnqn": 1}`)); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("bad config.json: %v", err)
	}
	dir := t.TempDir()
	e, n, err := loadAutoconnect(filepath.Join(dir, "none.conf"), filepath.Join(dir, "none.json"))
	if err != nil || len(e) != 0 || len(n) != 0 {
		t.Errorf("missing files: %v %v %v", e, n, err)
	}
	long := strings.Repeat("-a x ", 20000)
	if _, _, err := parseDiscoveryConf("long.conf", strings.NewReader(long)); err == nil {
		t.Error("a 100 kB line: no error")
	}
}
