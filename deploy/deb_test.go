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
// it was. Where librbd-dev and librados-dev are installed (test/deps.sh
// installs them) it builds nvmetd-rbd too and test.sh installs both, the
// Ceph libraries from Debian's archive: ldd, --version, --check-config of
// the gateway example, the static nvmetd's refusal of a gateway section
// (exit 78), remove and purge (with the libraries) leaving the root as it
// was.
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
	_, errRBD := os.Stat("/usr/include/rbd/librbd.h")
	_, errRADOS := os.Stat("/usr/include/rados/librados.h")
	withRBD := errRBD == nil && errRADOS == nil
	out := t.TempDir()
	build := exec.Command("deb/build.sh", out)
	build.Env = append(os.Environ(), "NVMETD_DEB_RBD=0")
	if withRBD {
		build.Env[len(build.Env)-1] = "NVMETD_DEB_RBD=1"
	}
	b, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("deb/build.sh: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "nvmetd_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("packages built: %v\n%s", debs, b)
	}
	args := []string{debs[0]}
	rdebs, _ := filepath.Glob(filepath.Join(out, "nvmetd-rbd_*.deb"))
	if withRBD {
		if len(rdebs) != 1 {
			t.Fatalf("nvmetd-rbd packages built: %v\n%s", rdebs, b)
		}
		args = append(args, rdebs[0])
	} else {
		t.Logf("nvmetd-rbd not built or tested: /usr/include/rbd/librbd.h or /usr/include/rados/librados.h missing (librbd-dev, librados-dev: test/deps.sh installs them)")
	}
	run := exec.Command("deb/test.sh", args...)
	b, err = run.CombinedOutput()
	t.Logf("deb/test.sh:\n%s", b)
	if err != nil || !strings.Contains(string(b), ", 0 failed") {
		t.Fatalf("deb/test.sh: %v", err)
	}
	if withRBD && !strings.Contains(string(b), "ok   static nvmetd refuses a gateway section") {
		t.Fatalf("deb/test.sh did not test nvmetd-rbd")
	}
}
