package dhchapkey

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// asNobody runs a shell command as the unprivileged user nobody.
func asNobody(t *testing.T, script string) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %s: %v\n%s", script, err, out)
	}
}

// TestLoadRefusesFilesOthersControl: root loads a key file that another
// user (nobody) made, or that sits in a directory another user owns or may
// write to: each is refused, since that user chose the key or can swap it.
// Root's own file in a root directory, or in sticky /tmp-like directory,
// loads.
func TestLoadRefusesFilesOthersControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: nobody makes the files through setpriv")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	key, err := auth.GenerateKey(auth.KeyOptions{NQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e2"}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	rootKey := func(dir string) string {
		p := filepath.Join(dir, "host.key")
		if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Root's key in root's private directory: loads.
	if _, err := Load("file:" + rootKey(mkdir("private", 0o700))); err != nil {
		t.Fatalf("root's key: %v", err)
	}
	// In a sticky world-writable directory (as /tmp): root's own file loads.
	sticky := mkdir("sticky", os.ModeSticky|0o777)
	if _, err := Load("file:" + rootKey(sticky)); err != nil {
		t.Errorf("root's key in a sticky directory: %v", err)
	}
	// nobody's key (0600, a valid secret) in that directory: refused.
	asNobody(t, "umask 077; echo '"+key+"' > "+sticky+"/planted.key")
	if _, err := Load("file:" + filepath.Join(sticky, "planted.key")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("nobody's key file: %v", err)
	}
	// Root's key in a directory nobody made: refused.
	asNobody(t, "mkdir -m 0755 "+sticky+"/nobodys")
	p := filepath.Join(sticky, "nobodys", "host.key")
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("file:" + p); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a key in nobody's directory: %v", err)
	}
	// Root's key in a root directory everyone may write to (not sticky).
	if _, err := Load("file:" + rootKey(mkdir("open", 0o777))); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("a key in a world-writable directory: %v", err)
	}
	// A symbolic link to a key in nobody's directory is judged by the
	// directory of the file it points to.
	link := filepath.Join(mkdir("links", 0o700), "host.key")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("file:" + link); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a link to a key in nobody's directory: %v", err)
	}
}
