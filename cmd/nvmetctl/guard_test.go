package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
)

// TestCLIDestructiveGuards (issue 23.9): `clear` asks for --yes, and with
// a host connected neither `clear` nor `subsystem remove` goes ahead
// without --force: each names the connected host and changes nothing.
func TestCLIDestructiveGuards(t *testing.T) {
	d := startDaemon(t)
	const sub, hostnqn = "nqn.2014-08.org.example:one", "nqn.2014-08.org.nvmexpress:uuid:5e2b6f0c-8f37-4b4c-9a6e-3c2f1d0e9a11"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := initiator.Connect(ctx, initiator.Config{Address: fmt.Sprintf("127.0.0.1:%d", d.port), SubNQN: sub, HostNQN: hostnqn, NrIOQueues: 1, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	before := d.mustCtl(t, "ls")
	for _, args := range [][]string{{"clear"}, {"clear", "--yes"}, {"subsystem", "remove", sub}} {
		rc, _, errs := d.ctl(args...)
		if rc == exitOK {
			t.Fatalf("%v went ahead with a host connected", args)
		}
		if len(args) > 1 || args[0] != "clear" {
			if !strings.Contains(errs, hostnqn) || !strings.Contains(errs, "--force") {
				t.Errorf("%v: the refusal does not name the host and --force:\n%s", args, errs)
			}
		} else if !strings.Contains(errs, "--yes") {
			t.Errorf("clear without --yes: %s", errs)
		}
		if after := d.mustCtl(t, "ls"); after != before {
			t.Fatalf("%v: refused, but the configuration changed", args)
		}
	}
	rc, _, errs := d.ctl("subsystem", "remove", sub, "--force")
	if rc != exitOK || !strings.Contains(errs, "warning:") || !strings.Contains(errs, hostnqn) {
		t.Fatalf("subsystem remove --force: exit %d\n%s", rc, errs)
	}
}
