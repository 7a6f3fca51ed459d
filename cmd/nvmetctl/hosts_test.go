package main

import (
	"crypto/rand"

	"github.com/nvmetd/nvmetd/nvmeof/auth"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIHostsAndAuth (issue 23.13): nvmetctl sets a host's DH-HMAC-CHAP
// keys (file:PATH, or - from standard input; a literal on the command
// line, readable by every local user, is refused) and auth_required;
// `host list SUBNQN` lists the hosts a subsystem allows; `port list`
// prints lists, not Go slices; a refusal prints its problem once.
func TestCLIHostsAndAuth(t *testing.T) {
	d := startDaemon(t)
	const sub = "nqn.2014-08.org.example:one"
	const hostnqn = "nqn.2014-08.org.nvmexpress:uuid:5e2b6f0c-8f37-4b4c-9a6e-3c2f1d0e9a11"
	key, err := auth.GenerateKey(auth.KeyOptions{NQN: hostnqn}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(d.dir, "host.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, _, errs := d.ctl("host", "add", hostnqn, "--dhchap-key", key)
	if rc == exitOK || !strings.Contains(errs, "readable by every local user") {
		t.Errorf("a literal key on the command line: exit %d\n%s", rc, errs)
	}
	d.mustCtl(t, "host", "add", hostnqn, "--dhchap-key", "file:"+keyFile, "--description", "db")
	if out := d.mustCtl(t, "host", "list"); !strings.Contains(out, hostnqn+"\tkey\tdb") {
		t.Errorf("host list:\n%s", out)
	}
	d.in = strings.NewReader(key + "\n")
	d.mustCtl(t, "host", "set", hostnqn, "--dhchap-ctrl-key", "-")
	d.in = nil
	rc, _, errs = d.ctl("host", "allow", sub, hostnqn)
	if rc == exitOK || strings.Count(errs, "has no effect when allow_any_host") != 1 {
		t.Errorf("a refusal: exit %d, its problem said %d times:\n%s", rc, strings.Count(errs, "has no effect when allow_any_host"), errs)
	}
	d.mustCtl(t, "subsystem", "set", sub, "--allow-any-host=false", "--allow-host", hostnqn, "--auth-required")
	if out := d.mustCtl(t, "host", "list", sub); !strings.Contains(out, hostnqn) {
		t.Errorf("host list %s:\n%s", sub, out)
	}
	cfg := d.mustCtl(t, "-o", "json", "subsystem", "list")
	if !strings.Contains(cfg, `"auth_required": true`) {
		t.Errorf("auth_required not set:\n%s", cfg)
	}
	if out := d.mustCtl(t, "port", "list"); strings.Contains(out, "[") {
		t.Errorf("port list prints Go slices:\n%s", out)
	}
	rc, _, errs = d.ctl("namespace", "add", sub, "--nsid", "1", "--kind", "memory", "--size", "1MiB")
	if rc == exitOK || strings.Count(errs, "has a namespace 1") != 1 {
		t.Errorf("a refusal: exit %d, the problem said %d times:\n%s", rc, strings.Count(errs, "has a namespace 1"), errs)
	}
}
