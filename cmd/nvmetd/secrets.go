package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/target"
)

// redacted replaces a literal secret in what nvmetd prints.
const redacted = "<redacted: literal DH-HMAC-CHAP secret>"

// isLiteralSecret reports whether s is a secret written into the
// configuration itself (not "file:PATH", not empty).
func isLiteralSecret(s string) bool {
	if s == "" {
		return false
	}
	_, isFile := dhchapkey.IsFile(s)
	return !isFile
}

// hasLiteralSecrets reports whether cfg holds a literal DH-HMAC-CHAP
// secret (hosts[].dhchap_key or dhchap_ctrl_key): then the file that holds
// it must be readable by root (or the daemon's user) only.
func hasLiteralSecrets(cfg *target.Config) bool {
	for _, h := range cfg.Hosts {
		if isLiteralSecret(h.DHCHAPKey) || isLiteralSecret(h.DHCHAPCtrlKey) {
			return true
		}
	}
	return false
}

// redactSecrets returns cfg with its literal secrets replaced by a marker
// (a copy: cfg is not changed).
func redactSecrets(cfg target.Config) target.Config {
	hosts := make([]target.HostConfig, len(cfg.Hosts))
	for i, h := range cfg.Hosts {
		if isLiteralSecret(h.DHCHAPKey) {
			h.DHCHAPKey = redacted
		}
		if isLiteralSecret(h.DHCHAPCtrlKey) {
			h.DHCHAPCtrlKey = redacted
		}
		hosts[i] = h
	}
	cfg.Hosts = hosts
	return cfg
}

// secretFileWarning is a warning when the configuration file holds
// literal secrets and users other than its owner (and root's group) may
// read it; "" if not.
func secretFileWarning(file string, cfg *target.Config) string {
	if file == "" || !hasLiteralSecrets(cfg) {
		return ""
	}
	fi, err := os.Stat(file)
	if err != nil {
		return ""
	}
	perm := fi.Mode().Perm()
	gid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		gid = int(st.Gid)
	}
	if perm&0o004 == 0 && (perm&0o040 == 0 || gid == 0) {
		return ""
	}
	return fmt.Sprintf("config file %s holds literal DH-HMAC-CHAP secrets and other users may read it (mode %04o): chmod 0600 %s, or keep the keys in files (dhchap_key: file:/etc/nvmetd/HOST.key)", file, perm, file)
}
