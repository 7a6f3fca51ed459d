package main

import (
	"strings"
	"testing"
)

// TestCLIGroupStandalone: against an nvmetd that holds no gateway group
// configuration in RADOS, `nvmetctl group` says so, and a change made
// with --group (meant for the whole group) is refused before anything is
// sent: an operator who thinks he changes every gateway never changes only
// one.
func TestCLIGroupStandalone(t *testing.T) {
	d := startDaemon(t)
	rc, _, errs := d.ctl("group")
	if rc != exitFailure || !strings.Contains(errs, "holds no gateway group configuration in RADOS") {
		t.Fatalf("group: exit %d\n%s", rc, errs)
	}
	const nqn = "nqn.2014-08.org.example:group"
	rc, _, errs = d.ctl("--group", "subsystem", "add", nqn)
	if rc != exitFailure || !strings.Contains(errs, "holds no gateway group configuration in RADOS") {
		t.Fatalf("--group subsystem add: exit %d\n%s", rc, errs)
	}
	if ls := d.mustCtl(t, "ls"); strings.Contains(ls, nqn) {
		t.Fatalf("the subsystem was added:\n%s", ls)
	}
}
