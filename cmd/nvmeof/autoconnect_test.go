package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/initiator/autoconnect"
	"github.com/nvmetd/nvmetd/initiator/connd"
)

// TestAutoconnectSecretsReachConnect (issue 22.8; the parsers' half is
// initiator/autoconnect's TestAutoconnectSecrets): the secrets of
// discovery.conf and config.json reach connect as its flags, and the dry
// run shows none.
func TestAutoconnectSecretsReachConnect(t *testing.T) {
	dir := filepath.Join("..", "..", "initiator", "autoconnect", "testdata")
	entries, _, err := autoconnect.Load(filepath.Join(dir, "discovery.conf"), filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// What the connection is given: the secrets as connect's flags.
		var o connd.Options
		var output string
		fs := newFlagSet("connect", io.Discard)
		addConnectFlags(fs, &o, &output)
		if err := fs.Parse(append(append([]string{}, e.Args...), e.Secrets.Args()...)); err != nil {
			t.Fatalf("%s: %v", e.Source, err)
		}
		if o.Fabrics.DHCHAPSecret != e.Secrets.Host || o.Fabrics.DHCHAPCtrlSecret != e.Secrets.Ctrl {
			t.Errorf("%s: connect gets %q %q, want %+v", e.Source, o.Fabrics.DHCHAPSecret, o.Fabrics.DHCHAPCtrlSecret, e.Secrets)
		}
	}
	var out, errb bytes.Buffer
	code := runAutoconnect([]string{"--dry-run", "--discovery-conf", filepath.Join(dir, "discovery.conf"), "--config", filepath.Join(dir, "config.json")}, &out, &errb)
	if code != exitOK || strings.Contains(out.String()+errb.String(), "DHHC-1") || !strings.Contains(out.String(), "--dhchap-secret=<secret>") {
		t.Errorf("dry run (exit %d):\n%s\n%s", code, out.String(), errb.String())
	}
}
