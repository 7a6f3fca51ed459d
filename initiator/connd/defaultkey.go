package connd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// nvmetd's built-in default configuration (issue 22.5) requires
// DH-HMAC-CHAP of the one host it allows, this machine's host NQN, with a
// key nvmetd generates in its data directory:
//
//	DATADIR/default-subsystem.uuid  the default subsystem's NQN is nvmeof.UUIDNQN of this UUID
//	DATADIR/default-host.key        the host's DHHC-1 secret, one line, mode 0600, the daemon's user's
//
// DATADIR is $NVMETD_DATA_DIR, else /var/lib/nvmetd (root), else
// $XDG_STATE_HOME/nvmetd or ~/.local/state/nvmetd. connect given no
// --dhchap-secret for that subsystem takes the key from there, if the
// caller may read it and the file is safe: a regular file (not followed
// through a link), owned by root or the caller, that neither group nor
// others may access. Any other user has no key, and the target refuses its
// authentication.
const (
	defaultSubsystemUUIDFile = "default-subsystem.uuid"
	defaultHostKeyFile       = "default-host.key"
)

// nvmetdDataDirs are the data directories an nvmetd of this caller may
// use for its built-in default, most specific first.
func nvmetdDataDirs() []string {
	var dirs []string
	if d := os.Getenv("NVMETD_DATA_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "/var/lib/nvmetd")
	if os.Geteuid() != 0 {
		if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
			dirs = append(dirs, filepath.Join(x, "nvmetd"))
		} else if home, err := os.UserHomeDir(); err == nil {
			dirs = append(dirs, filepath.Join(home, ".local", "state", "nvmetd"))
		}
	}
	return dirs
}

// errNoDefaultKey: subnqn is not the default subsystem of any data
// directory, or its key file cannot be read by the caller (then the
// target decides: without a key the host fails authentication).
var errNoDefaultKey = errors.New("no default host key")

// defaultHostKey returns the DH-HMAC-CHAP host secret of nvmetd's default
// subsystem subnqn from the first data directory of dirs whose default
// subsystem it is, and the key file's path. uid is the caller's
// (effective) user ID. A key file that exists but is unsafe (a link, not
// a regular file, owned by another user, open to group or others) is an
// error; one the caller may not read is errNoDefaultKey.
func defaultHostKey(subnqn string, dirs []string, uid int) (secret, path string, err error) {
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, defaultSubsystemUUIDFile))
		if err != nil {
			continue
		}
		line, _, _ := strings.Cut(string(b), "\n")
		id, err := nvmeof.ParseUUID(strings.TrimSpace(line))
		if err != nil || nvmeof.UUIDNQN(id) != subnqn {
			continue
		}
		path = filepath.Join(d, defaultHostKeyFile)
		secret, err = readKeyFile(path, uid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return "", path, fmt.Errorf("%w: %s: %v", errNoDefaultKey, path, err)
		}
		if err != nil {
			return "", path, fmt.Errorf("nvmetd's default subsystem %s: host key %s refused: %w", subnqn, path, err)
		}
		return secret, path, nil
	}
	return "", "", errNoDefaultKey
}

// readKeyFile reads a one-line DHHC-1 secret from path: opened without
// following a final symbolic link (O_NOFOLLOW) or blocking on a FIFO,
// then checked on the open file (no race between check and read).
func readKeyFile(path string, uid int) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return "", errors.New("it is a symbolic link")
		}
		return "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", errors.New("not a regular file")
	case st.Uid != 0 && int(st.Uid) != uid:
		return "", fmt.Errorf("owned by uid %d, neither root nor you (uid %d)", st.Uid, uid)
	case st.Mode&0o077 != 0:
		return "", fmt.Errorf("mode %04o: group or others may access it (want 0600 or 0400)", st.Mode&0o7777)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if _, err := auth.ParseSecret(line); err != nil {
		return "", err
	}
	return line, nil
}
