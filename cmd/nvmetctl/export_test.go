package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIExportRestoreNoop (issue 23.12): nvmetcli's export of a running
// configuration, restored unchanged, is a no-op: no namespace is reopened
// and no host is notified. And the export carries the identifiers hosts
// see (the derived NGUID and UUID of a namespace that configures none), so
// that moving the file to kernel nvmet keeps the namespace's identity.
func TestCLIExportRestoreNoop(t *testing.T) {
	d := startDaemon(t)
	img := filepath.Join(d.dir, "ns2.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	d.mustCtl(t, "namespace", "add", "nqn.2014-08.org.example:one", "--nsid", "2", "--kind", "file", "--path", img)
	// nvmetcli's format has no memory namespaces.
	d.mustCtl(t, "namespace", "remove", "nqn.2014-08.org.example:one", "1")
	out := filepath.Join(d.dir, "export.json")
	if rc, _, errs := d.ctl("export", out); rc != exitOK {
		t.Fatalf("export: exit %d\n%s", rc, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "00000000-0000-0000-0000-000000000000") {
		t.Errorf("the export has all-zero identifiers:\n%s", b)
	}
	if !strings.Contains(string(b), `"nguid": "`) || !strings.Contains(string(b), `"uuid": "`) {
		t.Errorf("the export has no identifiers:\n%s", b)
	}
	restored := d.mustCtl(t, "restore", out)
	if strings.Contains(restored, "namespace") || strings.Contains(restored, "changed") {
		t.Errorf("restore of the export changed something:\n%s", restored)
	}
}
