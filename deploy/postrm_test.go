package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDebPurgeKeepsData runs the nvmetd package's postrm (taken from
// deploy/deb/build.sh, its paths moved into a temporary directory) as
// `apt purge nvmetd` does, after dpkg has removed the conffile: the
// namespace image, the default host key and an admin's key file survive,
// and the script says where they are. (make deb-test checks the same in a
// Debian root.)
func TestDebPurgeKeepsData(t *testing.T) {
	b, err := os.ReadFile("deb/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)cat > "\$root/DEBIAN/postrm" <<'SH'\n(.*?)\nSH\n`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no postrm in deb/build.sh")
	}
	root := t.TempDir()
	script := strings.NewReplacer("/var/lib/nvmetd", root+"/var/lib/nvmetd", "/etc/nvmetd", root+"/etc/nvmetd",
		"/run/systemd/system", root+"/run/systemd/system").Replace(string(m[1]))
	files := map[string]string{
		"var/lib/nvmetd/default-ns1.img":        "the namespace's data",
		"var/lib/nvmetd/default-host.key":       "DHHC-1:00:key:",
		"var/lib/nvmetd/default-subsystem.uuid": "0f0f3a3e-3e9c-4c1e-8a55-5b2f4a7d1c01",
		"etc/nvmetd/host1.key":                  "DHHC-1:01:admin's key:",
	}
	for f, c := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("sh", "-c", script, "postrm", "purge").CombinedOutput()
	if err != nil {
		t.Fatalf("postrm purge: %v\n%s", err, out)
	}
	for f, c := range files {
		if got, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(got) != c {
			t.Errorf("purge lost %s: %v", f, err)
		}
	}
	if !strings.Contains(string(out), "purge keeps the data: "+root+"/var/lib/nvmetd") {
		t.Errorf("purge does not say what it kept: %q", out)
	}

	// An empty configuration directory goes; no data directory, no message.
	root2 := t.TempDir()
	script2 := strings.NewReplacer("/var/lib/nvmetd", root2+"/var/lib/nvmetd", "/etc/nvmetd", root2+"/etc/nvmetd",
		"/run/systemd/system", root2+"/run/systemd/system").Replace(string(m[1]))
	if err := os.MkdirAll(filepath.Join(root2, "etc/nvmetd"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("sh", "-c", script2, "postrm", "purge").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("postrm purge of an empty install: %v %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(root2, "etc/nvmetd")); !os.IsNotExist(err) {
		t.Errorf("the empty /etc/nvmetd is left: %v", err)
	}
}
