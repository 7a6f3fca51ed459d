package autoconnect

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
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
		parse func(string, *os.File) ([]Entry, []string, error)
	}{
		{"discovery.conf", func(n string, f *os.File) ([]Entry, []string, error) { return parseDiscoveryConf(n, f) }},
		{"config.json", func(n string, f *os.File) ([]Entry, []string, error) { return parseConfigJSON(n, f) }},
	} {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			entries, notes, err := c.parse(c.file, f)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(struct {
				Entries []Entry  `json:"entries"`
				Notes   []string `json:"notes"`
			}{entries, notes}, "", "  ")
			got = append(got, '\n')
			golden := filepath.Join("testdata", c.file+".golden")
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
	e, n, err := Load(filepath.Join(dir, "none.conf"), filepath.Join(dir, "none.json"))
	if err != nil || len(e) != 0 || len(n) != 0 {
		t.Errorf("missing files: %v %v %v", e, n, err)
	}
	long := strings.Repeat("-a x ", 20000)
	if _, _, err := parseDiscoveryConf("long.conf", strings.NewReader(long)); err == nil {
		t.Error("a 100 kB line: no error")
	}
}

// TestAutoconnectSecrets (issue 22.8): the DH-HMAC-CHAP secrets of
// discovery.conf (-S/--dhchap-secret, -C/--dhchap-ctrl-secret) and of
// config.json (a port's dhchap_key and dhchap_ctrl_key, a host's
// dhchap_key) reach the connection; no note, no dry-run line and no
// golden output shows one. Before, autoconnect printed discovery.conf's
// secrets to stderr (the journal) as dropped options and connected
// without them.
func TestAutoconnectSecrets(t *testing.T) {
	dir := "testdata"
	entries, notes, err := Load(filepath.Join(dir, "discovery.conf"), filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		if strings.Contains(n, "DHHC-1") {
			t.Errorf("a note shows a secret: %s", n)
		}
	}
	want := map[string]Secrets{
		"config.json:host[0].subsystems[0].ports[0]": {Host: "DHHC-1:00:cG9ydC1ob3N0LXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVmMDEy3hL4Vw==:",
			Ctrl: "DHHC-1:00:cG9ydC1jdHJsLXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVmMDEy3hL4Vw==:"},
		"config.json:host[1].subsystems[0].ports[0]": {Host: "DHHC-1:00:aG9zdC1sZXZlbC1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZjAx3hL4Vw==:"},
		"discovery.conf:17":                          {Host: "DHHC-1:00:dGVzdC1ob3N0LXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVmMDEy3hL4Vw==:", Ctrl: "file:/etc/nvme/ctrl.key"},
	}
	got := map[string]Secrets{}
	for _, e := range entries {
		src := strings.TrimPrefix(e.Source, dir+"/")
		if e.Secrets != (Secrets{}) {
			got[src] = e.Secrets
		}
		for _, a := range e.Args {
			if strings.Contains(a, "DHHC-1") || strings.Contains(a, "dhchap") {
				t.Errorf("%s: a secret in the printed arguments: %v", src, e.Args)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("secrets:\n got %+v\nwant %+v", got, want)
	}
	for _, g := range []string{"discovery.conf.golden", "config.json.golden"} {
		if b, _ := os.ReadFile(filepath.Join(dir, g)); strings.Contains(string(b), "DHHC-1") {
			t.Errorf("%s shows a secret", g)
		}
	}
}
