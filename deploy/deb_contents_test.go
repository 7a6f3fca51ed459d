package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebContents builds the nvmetd package (deploy/deb/build.sh, without
// nvmetd-rbd; no root needed) and checks its file list and the texts that
// name paths (issue 23.8: the package lacked the operations kit, and the
// autoconnect unit of the source runs /usr/local/bin/nvmeof): the
// autoconnect unit runs /usr/bin/nvmeof, the dashboard, the alert rules and
// the Wireshark dissector are under /usr/share/nvmetd (the dissector where
// nvmetd trace --help says), the example configurations under
// /usr/share/doc/nvmetd/examples, and no shipped configuration, example or
// unit points into the source tree. NVMETD_DEB=path checks a package built
// already (make deb) instead.
func TestDebContents(t *testing.T) {
	deb := os.Getenv("NVMETD_DEB")
	if deb == "" {
		if testing.Short() {
			t.Skip("builds the package: skipped in -short mode (NVMETD_DEB=dist/nvmetd_....deb checks a built one)")
		}
		if _, err := exec.LookPath("dpkg-deb"); err != nil {
			t.Skipf("needs dpkg-deb to build the package: %v", err)
		}
		out := t.TempDir()
		build := exec.Command("deb/build.sh", out)
		build.Env = append(os.Environ(), "NVMETD_DEB_RBD=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("deb/build.sh: %v\n%s", err, b)
		}
		debs, _ := filepath.Glob(filepath.Join(out, "nvmetd_*.deb"))
		if len(debs) != 1 {
			t.Fatalf("packages built: %v", debs)
		}
		deb = debs[0]
	}
	b, err := exec.Command("dpkg-deb", "-c", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -c %s: %v", deb, err)
	}
	files := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			files[strings.TrimPrefix(f[5], ".")] = true
		}
	}
	for _, f := range []string{
		"/lib/systemd/system/nvmetd.service",
		"/lib/systemd/system/nvmeof-autoconnect.service",
		"/usr/share/nvmetd/grafana/nvmetd-dashboard.json",
		"/usr/share/nvmetd/prometheus/nvmetd-rules.yml",
		"/usr/share/nvmetd/wireshark/nvmeof-iwarp.lua",
		"/usr/share/doc/nvmetd/examples/nvmetd.yaml",
		"/usr/share/doc/nvmetd/examples/nvmetd-auth.yaml",
		"/usr/share/doc/nvmetd/examples/nvmetd-gateway.yaml",
		"/etc/nvmetd/nvmetd.yaml",
		"/usr/bin/nvmeof",
		"/usr/sbin/nvmetd",
	} {
		if !files[f] {
			t.Errorf("the package lacks %s", f)
		}
	}
	// The texts as installed.
	x := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(x, p))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	if u := read("lib/systemd/system/nvmeof-autoconnect.service"); !strings.Contains(u, "\nExecStart=/usr/bin/nvmeof autoconnect\n") {
		t.Errorf("nvmeof-autoconnect.service does not run /usr/bin/nvmeof:\n%s", u)
	}
	for _, p := range []string{"etc/nvmetd/nvmetd.yaml", "usr/share/doc/nvmetd/examples/nvmetd.yaml", "usr/share/doc/nvmetd/examples/nvmetd-auth.yaml",
		"usr/share/doc/nvmetd/examples/nvmetd-gateway.yaml", "lib/systemd/system/nvmetd.service", "lib/systemd/system/nvmeof-autoconnect.service"} {
		text := read(p)
		for _, bad := range []string{" configs/", "(configs/", " deploy/", "/usr/local/"} {
			if strings.Contains(text, bad) {
				t.Errorf("/%s points into the source tree or /usr/local (%q)", p, bad)
			}
		}
	}
	if c := read("etc/nvmetd/nvmetd.yaml"); !strings.Contains(c, "/usr/share/nvmetd/grafana") || !strings.Contains(c, "/usr/share/doc/nvmetd/examples/nvmetd-auth.yaml") {
		t.Errorf("the shipped configuration does not name the installed dashboard and auth example")
	}
}
