package daemon

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownKeyHintInstalledPath is issue 23.8: --check-config answered an
// unknown key with "see configs/nvmetd.yaml", a path of the source tree
// that an installed nvmetd does not have. It names the installed example
// when there is one, and never a source path.
func TestUnknownKeyHintInstalledPath(t *testing.T) {
	dir := isolate(t)
	cfg := writeFile(t, dir, "nvmetd.yaml", "daemon:\n  bogus_setting: 1\n")
	check := func() string {
		var stderr bytes.Buffer
		if code := run([]string{"--check-config", "--config", cfg}, io.Discard, &stderr); code != exitFailure {
			t.Fatalf("--check-config of an unknown key: exit %d\n%s", code, stderr.String())
		}
		return stderr.String()
	}
	saved := exampleConfig
	t.Cleanup(func() { exampleConfig = saved })
	exampleConfig = filepath.Join(dir, "examples", "nvmetd.yaml")
	for _, installed := range []bool{false, true} {
		if installed {
			if err := os.MkdirAll(filepath.Dir(exampleConfig), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Dir(exampleConfig), "nvmetd.yaml", "# example\n")
		}
		out := check()
		if !strings.Contains(out, "daemon.bogus_setting: unknown key") || strings.Contains(out, "configs/") || !strings.Contains(out, exampleConfig) {
			t.Errorf("installed example %v: %s", installed, out)
		}
	}
}
