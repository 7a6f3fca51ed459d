// Package configfile is nvmetd's YAML configuration file on disk: read
// with bounds (a regular file of at most MaxSize bytes), written from a
// configuration (Node: the mapstructure keys, durations as "30s"), and
// the running configuration saved back into it (Save) in place: the
// ports, subsystems and hosts that did not change keep their text and
// comments, the rest of the file stays as it was, the file is replaced
// atomically and kept private when it holds a literal secret. Loading
// (viper: the file, the environment, flags) is the daemon's (target/daemon).
package configfile

import (
	"fmt"
	"io"
	"os"

	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/target"
)

// MaxSize bounds the configuration file: a larger one (or
// /dev/zero) is refused before it is read whole.
const MaxSize = 1 << 20

// Read reads the configuration file: a regular file (or a
// symbolic link to one) of at most MaxSize bytes.
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		what := "a directory"
		switch t := fi.Mode().Type(); {
		case t&os.ModeCharDevice != 0:
			what = "a character device"
		case t&os.ModeDevice != 0:
			what = "a block device"
		case t&os.ModeNamedPipe != 0:
			what = "a named pipe"
		case t&os.ModeSocket != 0:
			what = "a socket"
		}
		return nil, fmt.Errorf("%s is %s, not a regular file", path, what)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes; a configuration file is far smaller", path, MaxSize)
	}
	return b, nil
}

// IsLiteralSecret reports whether s is a secret written into the
// configuration itself (not "file:PATH", not empty).
func IsLiteralSecret(s string) bool {
	if s == "" {
		return false
	}
	_, isFile := dhchapkey.IsFile(s)
	return !isFile
}

// HasLiteralSecrets reports whether cfg holds a literal DH-HMAC-CHAP
// secret (hosts[].dhchap_key or dhchap_ctrl_key): then the file that holds
// it must be readable by root (or the daemon's user) only.
func HasLiteralSecrets(cfg *target.Config) bool {
	for _, h := range cfg.Hosts {
		if IsLiteralSecret(h.DHCHAPKey) || IsLiteralSecret(h.DHCHAPCtrlKey) {
			return true
		}
	}
	return false
}
