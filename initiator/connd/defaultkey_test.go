package connd

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// TestDefaultHostKeyLookup (issue 22.5): connect without --dhchap-secret
// to nvmetd's default subsystem takes the host key from the data
// directory whose default subsystem it is, only from a safe file: a
// symbolic link, a FIFO, a file of another user or one group or others may
// read is refused, and a subsystem that is not the default gets no key.
func TestDefaultHostKeyLookup(t *testing.T) {
	uid := os.Geteuid()
	key, err := auth.GenerateKey(auth.KeyOptions{NQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e2"}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mkDir := func(t *testing.T, id [16]byte, keyMode os.FileMode) (dir, nqn string) {
		dir = t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, defaultSubsystemUUIDFile), []byte(nvmeof.FormatUUID(id)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if keyMode != 0 {
			p := filepath.Join(dir, defaultHostKeyFile)
			if err := os.WriteFile(p, []byte(key+"\n"), keyMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, keyMode); err != nil {
				t.Fatal(err)
			}
		}
		return dir, nvmeof.UUIDNQN(id)
	}
	id1 := [16]byte{1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16}
	id2 := id1
	id2[15] = 99

	t.Run("ok", func(t *testing.T) {
		other, _ := mkDir(t, id2, 0o600)
		dir, nqn := mkDir(t, id1, 0o600)
		sec, path, err := defaultHostKey(nqn, []string{other, dir}, uid)
		if err != nil || sec != key || path != filepath.Join(dir, defaultHostKeyFile) {
			t.Fatalf("got %q %q %v, want the key of %s", sec, path, err, dir)
		}
		if _, err := auth.ParseSecret(sec); err != nil {
			t.Fatal(err)
		}
		if _, _, err := defaultHostKey("nqn.2024-01.com.example:other", []string{other, dir}, uid); !errors.Is(err, errNoDefaultKey) {
			t.Fatalf("a subsystem that is no default: %v", err)
		}
		if _, _, err := defaultHostKey(nqn, []string{filepath.Join(dir, "absent")}, uid); !errors.Is(err, errNoDefaultKey) {
			t.Fatalf("no data directory: %v", err)
		}
	})
	t.Run("no-key-file", func(t *testing.T) {
		dir, nqn := mkDir(t, id1, 0)
		if _, _, err := defaultHostKey(nqn, []string{dir}, uid); !errors.Is(err, errNoDefaultKey) {
			t.Fatalf("%v, want errNoDefaultKey", err)
		}
	})
	refusedAs := func(t *testing.T, caller int, dir, nqn, want string) {
		t.Helper()
		sec, _, err := defaultHostKey(nqn, []string{dir}, caller)
		if err == nil || errors.Is(err, errNoDefaultKey) || !strings.Contains(err.Error(), want) || sec != "" {
			t.Fatalf("got %q, %v; want refused with %q", sec, err, want)
		}
		if strings.Contains(err.Error(), key) {
			t.Fatalf("the error quotes the secret: %v", err)
		}
	}
	refused := func(t *testing.T, dir, nqn, want string) { t.Helper(); refusedAs(t, uid, dir, nqn, want) }
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		t.Run("mode-"+mode.String(), func(t *testing.T) {
			dir, nqn := mkDir(t, id1, mode)
			refused(t, dir, nqn, "group or others")
		})
	}
	t.Run("symlink", func(t *testing.T) {
		dir, nqn := mkDir(t, id1, 0)
		real, _ := mkDir(t, id2, 0o600)
		if err := os.Symlink(filepath.Join(real, defaultHostKeyFile), filepath.Join(dir, defaultHostKeyFile)); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, nqn, "symbolic link")
	})
	t.Run("fifo", func(t *testing.T) {
		dir, nqn := mkDir(t, id1, 0)
		if err := syscall.Mkfifo(filepath.Join(dir, defaultHostKeyFile), 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, nqn, "not a regular file")
	})
	t.Run("other-owner", func(t *testing.T) {
		dir, nqn := mkDir(t, id1, 0o600)
		p := filepath.Join(dir, defaultHostKeyFile)
		caller := uid
		if uid == 0 {
			// root: the file belongs to another user.
			if err := os.Chown(p, 12345, 12345); err != nil {
				t.Fatal(err)
			}
		} else {
			// not root: the file is ours, the caller another user.
			caller = uid + 1
		}
		refusedAs(t, caller, dir, nqn, "neither root nor you")
	})
	t.Run("malformed", func(t *testing.T) {
		dir, nqn := mkDir(t, id1, 0o600)
		if err := os.WriteFile(filepath.Join(dir, defaultHostKeyFile), []byte("DHHC-1:01:bm90IGEga2V5:\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, nqn, "")
	})
}
