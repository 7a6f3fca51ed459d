package daemon

import (
	"fmt"
	"os"
	"syscall"

	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/configfile"
)

// redacted replaces a literal secret in what nvmetd prints.
const redacted = "<redacted: literal DH-HMAC-CHAP secret>"

// redactSecrets returns cfg with its literal secrets replaced by a marker
// (a copy: cfg is not changed).
func redactSecrets(cfg target.Config) target.Config {
	hosts := make([]target.HostConfig, len(cfg.Hosts))
	for i, h := range cfg.Hosts {
		if configfile.IsLiteralSecret(h.DHCHAPKey) {
			h.DHCHAPKey = redacted
		}
		if configfile.IsLiteralSecret(h.DHCHAPCtrlKey) {
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
	if file == "" || !configfile.HasLiteralSecrets(cfg) {
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
