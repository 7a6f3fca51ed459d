package target

import (
	"fmt"
	"strings"

	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// This file holds the DH-HMAC-CHAP settings of known hosts: their
// validation (pure) and their loading (secrets may live in files).

// validateAuth checks a host's dhchap_* settings without touching files.
func (h *HostConfig) validateAuth(v *validator, hp string) {
	checkKey := func(field, s string) {
		if s == "" {
			return
		}
		if path, ok := dhchapkey.IsFile(s); ok {
			if path == "" {
				v.add(hp+"."+field, "file: names no file")
			}
			return
		}
		if _, err := auth.ParseSecret(s); err != nil {
			// The error never quotes the secret.
			v.addErr(hp+"."+field, "not a DH-HMAC-CHAP secret (DHHC-1:<hh>:<base64>:, as nvme gen-dhchap-key prints it, or file:/path): "+strings.TrimPrefix(err.Error(), "auth: "), err)
		}
	}
	checkKey("dhchap_key", h.DHCHAPKey)
	checkKey("dhchap_ctrl_key", h.DHCHAPCtrlKey)
	if h.DHCHAPCtrlKey != "" && h.DHCHAPKey == "" {
		v.add(hp+".dhchap_ctrl_key", "needs dhchap_key (the controller authenticates itself only to a host that authenticates)")
	}
	if h.DHCHAPHash != "" {
		if _, err := auth.ParseHash(h.DHCHAPHash); err != nil {
			v.addErr(hp+".dhchap_hash", strings.TrimPrefix(err.Error(), "auth: "), err)
		}
	}
	if _, err := auth.ParseDHGroup(h.DHCHAPDHGroup); err != nil {
		v.addErr(hp+".dhchap_dhgroup", strings.TrimPrefix(err.Error(), "auth: "), err)
	}
}

// hostKeys are a host's DH-HMAC-CHAP settings, secrets loaded.
type hostKeys struct {
	host, ctrl *auth.Secret
	hash       auth.Hash
	group      auth.DHGroup
}

// authKeys are the keys of every host with a dhchap_key, by host NQN. It
// is replaced whole by a reload, never modified.
type authKeys map[string]*hostKeys

// loadAuthKeys reads the secrets of every host with a dhchap_key (literal
// or file:). A key file must be a regular file that neither its group nor
// others may access, as ssh requires of private keys. Errors name the field.
func loadAuthKeys(cfg *Config) (authKeys, error) {
	keys := authKeys{}
	var v validator
	for i := range cfg.Hosts {
		h := &cfg.Hosts[i]
		if h.DHCHAPKey == "" {
			continue
		}
		hp := fmt.Sprintf("hosts[%d]", i)
		k := &hostKeys{hash: auth.HashSHA256}
		var err error
		if k.host, err = dhchapkey.Load(h.DHCHAPKey); err != nil {
			v.addErr(hp+".dhchap_key", err.Error(), err)
			continue
		}
		if h.DHCHAPCtrlKey != "" {
			if k.ctrl, err = dhchapkey.Load(h.DHCHAPCtrlKey); err != nil {
				v.addErr(hp+".dhchap_ctrl_key", err.Error(), err)
				continue
			}
		}
		if h.DHCHAPHash != "" {
			if k.hash, err = auth.ParseHash(h.DHCHAPHash); err != nil {
				v.addErr(hp+".dhchap_hash", err.Error(), err)
				continue
			}
		}
		if k.group, err = auth.ParseDHGroup(h.DHCHAPDHGroup); err != nil {
			v.addErr(hp+".dhchap_dhgroup", err.Error(), err)
			continue
		}
		keys[h.NQN] = k
	}
	if len(v.problems) > 0 {
		return nil, &ValidationError{Problems: v.problems}
	}
	return keys, nil
}
