package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// createPrivate opens path for writing as a file that only the daemon's
// user can read: a new file is created with O_EXCL|O_NOFOLLOW, mode 0600
// (a symlink or a file another user created in its place is never
// followed or adopted). An existing file is truncated and reused only if it
// is a regular file with one link, owned by the daemon's user and
// accessible by nobody else; anything else (a symlink, a file another user
// pre-created, a 0666 file) is refused, because as root the daemon would
// write through it: hand a trace to another user, or overwrite a file a
// link points to.
func createPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err == nil {
		// The umask cannot widen 0600, but a default ACL on the directory
		// could: set the mode explicitly.
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return f, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	// O_NOFOLLOW: a symlink fails with ELOOP instead of being followed.
	f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link: refusing to write through it (remove it or choose another path)", path)
		}
		return nil, err
	}
	if err := checkPrivate(f, path); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// checkPrivate checks that an open file is a regular file with one link,
// owned by this process's user and not accessible by group or others.
func checkPrivate(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", path)
	}
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file: refusing to write to it", path)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s exists and is owned by uid %d, not by this daemon's user (uid %d): refusing to write to it (remove it or choose another path)", path, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s exists with mode %04o (group or others may access it): refusing to write to it (remove it or choose another path)", path, fi.Mode().Perm())
	case st.Nlink != 1:
		return fmt.Errorf("%s exists with %d hard links: refusing to write to it", path, st.Nlink)
	}
	return nil
}

// privateDir checks that dir is a directory owned by this process's user
// (or root) that only its owner can write to, so that nobody else can
// replace what the daemon keeps there. A sticky directory owned by root
// (/tmp) is accepted: there only a file's owner can remove or rename it,
// and the caller creates (or checks the owner of) the file itself.
func privateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Type() == os.ModeSymlink {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return err
		}
		if fi, err = os.Lstat(real); err != nil {
			return err
		}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return fmt.Errorf("directory %s is owned by uid %d, not by this daemon's user (uid %d) or root: another user controls what is in it", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 && !(fi.Mode()&os.ModeSticky != 0 && st.Uid == 0) {
		return fmt.Errorf("directory %s has mode %04o: group or others may write to it (chmod go-w)", dir, fi.Mode().Perm())
	}
	return nil
}
