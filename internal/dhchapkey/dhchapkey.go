// Package dhchapkey loads DH-HMAC-CHAP secrets for the target's
// configuration and the host's command line: literal ("DHHC-1:01:...:", as
// nvme gen-dhchap-key prints it) or "file:PATH". A key file must be a
// regular file that neither its group nor others may access, as ssh wants
// of private keys. (nvmeof/auth, which parses the secrets, does no file
// I/O.)
package dhchapkey

import (
	"fmt"
	"io"
	"os"
	"strings"

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
