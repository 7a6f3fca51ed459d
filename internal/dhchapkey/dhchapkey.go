// Package dhchapkey loads DH-HMAC-CHAP secrets for the target's
// configuration and the host's command line: literal ("DHHC-1:01:...:", as
// nvme gen-dhchap-key prints it) or "file:PATH". A key file must be a
// regular file that neither its group nor others may access, as ssh wants
// of private keys, owned by root or the user reading it, in a directory
// that no other user can write to (or a sticky one, such as /tmp): another
// user must not be able to choose the key, or swap the file. (nvmeof/auth,
// which parses the secrets, does no file I/O.)
package dhchapkey

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// FilePrefix marks a secret kept in a file: "file:/etc/nvmetd/host1.key".
const FilePrefix = "file:"

// maxFile bounds what is read of a key file (a secret is under 100 bytes).
const maxFile = 4096

// IsFile reports whether s names a key file, and returns its path.
func IsFile(s string) (path string, ok bool) {
	path, ok = strings.CutPrefix(s, FilePrefix)
	return strings.TrimSpace(path), ok
}

// Load parses a literal secret or reads one from a file. Errors never
// quote the secret.
func Load(s string) (*auth.Secret, error) {
	path, ok := IsFile(s)
	if !ok {
		return auth.ParseSecret(s)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is accessible by group or others (mode %04o): keep secrets mode 0600 or 0400 (chmod go-rwx)", path, perm)
	}
	if err := checkOwner(path, st); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sec, err := auth.ParseSecret(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sec, nil
}

// checkOwner refuses a key file that another user owns, or that sits in a
// directory another user owns or may write to (they could replace it):
// the file (opened as fi) must be owned by root or this process's user;
// its directory (after symbolic links) owned by root or this user and not
// writable by group or others, unless it is sticky (only a file's owner
// may then remove or rename it).
func checkOwner(path string, fi os.FileInfo) error {
	euid := os.Geteuid()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", path)
	}
	if st.Uid != 0 && int(st.Uid) != euid {
		return fmt.Errorf("%s is owned by uid %d, neither root nor this process's user (uid %d): another user chose this key", path, st.Uid, euid)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	di, err := os.Stat(dir)
	if err != nil {
		return err
	}
	dst, ok := di.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", dir)
	}
	if dst.Uid != 0 && int(dst.Uid) != euid {
		return fmt.Errorf("%s: its directory %s is owned by uid %d, neither root nor this process's user (uid %d): that user can replace the key", path, dir, dst.Uid, euid)
	}
	if di.Mode().Perm()&0o022 != 0 && di.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%s: its directory %s is writable by group or others (mode %04o): they can replace the key (chmod go-w %s)", path, dir, di.Mode().Perm(), dir)
	}
	return nil
}
