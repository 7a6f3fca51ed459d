package main

import (
	"strings"
	"testing"
)

// TestCLIGroupStandalone: against an nvmetd that is no gateway,
// `nvmetctl group` says so, and a change made
// with --group (meant for the whole group) is refused before anything is
// sent: an operator who thinks he changes every gateway never changes only
// one.
func TestCLIGroupStandalone(t *testing.T) {
	d := startDaemon(t)
	rc, _, errs := d.ctl("group")
	if rc != exitFailure || !strings.Contains(errs, "not a member of a gateway group") {
		t.Fatalf("group: exit %d\n%s", rc, errs)
	}
	const nqn = "nqn.2014-08.org.example:group"
	rc, _, errs = d.ctl("--group", "subsystem", "add", nqn)
	if rc != exitFailure || !strings.Contains(errs, "not a member of a gateway group") {
		t.Fatalf("--group subsystem add: exit %d\n%s", rc, errs)
	}
	// A base version given by hand is refused by the daemon itself.
	rc, _, errs = d.ctl("--group-version", "3", "subsystem", "add", nqn)
	if rc != exitFailure || !strings.Contains(errs, "holds no gateway group configuration in RADOS") {
		t.Fatalf("--group-version 3 subsystem add: exit %d\n%s", rc, errs)
	}
	if ls := d.mustCtl(t, "ls"); strings.Contains(ls, nqn) {
		t.Fatalf("the subsystem was added:\n%s", ls)
	}
}

// TestCLIGatewayDrainStandalone: drain, undrain and move are refused by a
// stand-alone nvmetd (no gateway group), as by the API (404), and the
// command line is checked before anything is sent.
func TestCLIGatewayDrainStandalone(t *testing.T) {
	d := startDaemon(t)
	for _, args := range [][]string{{"gateway", "drain", "gw-a"}, {"gateway", "undrain", "gw-a"}, {"group", "move", "1", "gw-a"}} {
		rc, _, errs := d.ctl(args...)
		if rc != exitFailure || !strings.Contains(errs, "not a member of a gateway group") {
			t.Fatalf("%v: exit %d\n%s", args, rc, errs)
		}
	}
	if rc, _, errs := d.ctl("group", "move", "x", "gw-a"); rc != exitFailure || !strings.Contains(errs, `ANAGRPID "x": not an ANA group ID`) {
		t.Fatalf("group move x: exit %d\n%s", rc, errs)
	}
	if rc, _, _ := d.ctl("gateway", "drain"); rc != exitUsage {
		t.Fatalf("gateway drain without a name: exit %d", rc)
	}
}
