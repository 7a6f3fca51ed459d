package target

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// TestConfigCheck: Check names the field of every storage problem and
// refuses memory namespaces the machine cannot hold (issue 11: 1000 TiB
// killed the daemon at start, 64 TiB was accepted on a 23 GiB machine).
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	ok := fileNS(1, filepath.Join(dir, "ok.img"), "1MiB")
	// Half the machine each: fine alone, too much together.
	half := strconv.FormatInt(backend.PhysicalMemory()/2>>20, 10) + "MiB"
	for _, c := range []struct {
		name   string
		ns     []NamespaceConfig
		fields []string
	}{
		{"fine", []NamespaceConfig{ok, memNS(2, "64MiB")}, nil},
		{"directory", []NamespaceConfig{ok, fileNS(2, dir, "1MiB")}, []string{"subsystems[0].namespaces[1].backend.path"}},
		{"disabled is not checked", []NamespaceConfig{func() NamespaceConfig {
			n := fileNS(1, dir, "1MiB")
			f := false
			n.Enabled = &f
			return n
		}()}, nil},
		{"block on a missing device", []NamespaceConfig{{NSID: 1, Backend: BackendConfig{Kind: "block", Path: "/dev/nvmetd-none"}}}, []string{"subsystems[0].namespaces[0].backend.path"}},
		{"1000TiB memory", []NamespaceConfig{memNS(1, "1000TiB")}, []string{"subsystems[0].namespaces[0].backend.size"}},
		{"64TiB memory", []NamespaceConfig{memNS(1, "64TiB")}, []string{"subsystems[0].namespaces[0].backend.size"}},
		{"memory together", []NamespaceConfig{memNS(1, "1TiB"), memNS(2, "1TiB")}, []string{"subsystems[0].namespaces[0].backend.size", "subsystems[0].namespaces[1].backend.size"}},
		{"memory sum", []NamespaceConfig{memNS(1, half), memNS(2, half)}, []string{"subsystems[0].namespaces[1].backend.size"}},
	} {
		cfg := testConfig(t, c.ns...)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: Validate: %v", c.name, err)
		}
		err := cfg.Check()
		if c.fields == nil {
			if err != nil {
				t.Errorf("%s: Check: %v", c.name, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: Check = %v, want problems with %v", c.name, err, c.fields)
			continue
		}
		var got []string
		for _, p := range ve.Problems {
			got = append(got, p.Field)
		}
		if strings.Join(got, " ") != strings.Join(c.fields, " ") {
			t.Errorf("%s: problems %v, want fields %v", c.name, ve, c.fields)
		}
	}
}
