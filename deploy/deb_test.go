package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebPackage builds the Debian package (make deb's script) and runs
// deploy/deb/test.sh on it: install into a clean Debian root made by
// debootstrap (cached after the first run), nvmetd --check-config on the
// shipped configuration, --version of every program, man pages and
// completions present, remove keeps the conffile, purge leaves the root as
// it was.
func TestDebPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package and a Debian root: skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: debootstrap and chroot")
	}
	for _, tool := range []string{"dpkg-deb", "dpkg", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	out := t.TempDir()
	build := exec.Command("deb/build.sh", out)
	b, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("deb/build.sh: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "nvmetd_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("packages built: %v\n%s", debs, b)
	}
	run := exec.Command("deb/test.sh", debs[0])
	b, err = run.CombinedOutput()
	t.Logf("deb/test.sh:\n%s", b)
	if err != nil || !strings.Contains(string(b), ", 0 failed") {
		t.Fatalf("deb/test.sh: %v", err)
	}
}
