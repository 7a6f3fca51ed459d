package target

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// guardReload applies an edit of the running configuration as the daemon
// does (Validate, then Reload) and returns the error.
func guardReload(t *testing.T, tg *Target, edit func(c *Config) error) error {
	t.Helper()
	nc := tg.s.cfg.Clone()
	if err := edit(nc); err != nil {
		t.Fatalf("edit: %v", err)
	}
	nc.ApplyDefaults()
	if err := nc.Validate(); err != nil {
		t.Fatalf("Validate (the daemon's check) refuses the edit: %v", err)
	}
	return tg.Reload(nc)
}

// wantGuardRefusal checks that err is the guard's refusal naming field.
func wantGuardRefusal(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ve *ValidationError
	if !errors.Is(err, ErrGatewayGuard) || !errors.As(err, &ve) ||
		(!strings.HasPrefix(what, "SetGatewayGuard") && !errors.Is(err, ErrReloadRefused)) {
		t.Fatalf("%s: %v, want ErrGatewayGuard (and ErrReloadRefused) with a *ValidationError", what, err)
	}
	for _, p := range ve.Problems {
		if p.Field == field {
			t.Logf("%s: refused: %v", what, p)
			return
		}
	}
	t.Fatalf("%s: %v, want a problem at %s", what, err, field)
}

// TestGatewayGuard: in a gateway whose group manages ANA groups 1 and 2,
// every path that can put a namespace in front of hosts refuses one in
// another group (7), as a whole: a start, a reload (SIGHUP), and each
// management edit that adds or moves a namespace (add a namespace, add a
// subsystem with one, change a namespace's ana_group); the running
// configuration is checked when the guard is set. The managed groups
// default to inaccessible on a port that does not list them, never
// optimized; another group keeps the optimized default.
func TestGatewayGuard(t *testing.T) {
	ns1 := memNS(1, "1MiB")
	ns1.ANAGroup = 1
	cfg := testConfig(t, ns1)
	s := startServer(t, cfg)
	tg := &Target{s: s}
	guard := GatewayGuard{ANAGroups: []uint32{1, 2}}

	view := func(group uint32) nvmeof.ANAState {
		s.regMu.RLock()
		defer s.regMu.RUnlock()
		return s.ports[1].ana.Load()[group]
	}
	if st := view(1); st != nvmeof.ANAOptimized {
		t.Fatalf("stand-alone: group 1 unlisted is %v, want optimized", st)
	}
	if err := tg.SetGatewayGuard(guard); err != nil {
		t.Fatal(err)
	}
	for _, g := range []uint32{1, 2} {
		if st := view(g); st != nvmeof.ANAInaccessible {
			t.Errorf("gateway: managed group %d, which the port does not list, is %v; want inaccessible", g, st)
		}
	}
	if st := view(7); st != nvmeof.ANAOptimized {
		t.Errorf("gateway: group 7 (not managed, no namespace) is %v, want optimized (the default)", st)
	}

	// Reload (SIGHUP: a file with a namespace in group 7).
	err := guardReload(t, tg, func(c *Config) error {
		n := memNS(2, "1MiB")
		n.ANAGroup = 7
		c.Subsystems[0].Namespaces = append(c.Subsystems[0].Namespaces, n)
		return nil
	})
	wantGuardRefusal(t, "reload with a namespace in group 7", err, "subsystems[0].namespaces[1].ana_group")

	// The management API's edits.
	err = guardReload(t, tg, func(c *Config) error {
		n := memNS(3, "1MiB")
		n.ANAGroup = 7
		_, _, err := c.AddNamespace(testSubNQN, n)
		return err
	})
	wantGuardRefusal(t, "AddNamespace in group 7", err, "subsystems[0].namespaces[1].ana_group")
	err = guardReload(t, tg, func(c *Config) error {
		n, _, err := c.Namespace(testSubNQN, 1)
		if err == nil {
			n.ANAGroup = 7
		}
		return err
	})
	wantGuardRefusal(t, "moving namespace 1 to group 7", err, "subsystems[0].namespaces[0].ana_group")
	err = guardReload(t, tg, func(c *Config) error {
		n := memNS(1, "1MiB")
		n.ANAGroup = 7
		_, err := c.AddSubsystem(SubsystemConfig{NQN: "nqn.2014-08.org.nvmexpress:guard", AllowAnyHost: true, Namespaces: []NamespaceConfig{n}})
		if err == nil {
			_, err = c.LinkSubsystem(1, "nqn.2014-08.org.nvmexpress:guard")
		}
		return err
	})
	wantGuardRefusal(t, "AddSubsystem with a namespace in group 7", err, "subsystems[1].namespaces[0].ana_group")

	// Nothing changed.
	st := tg.Status()
	if len(st.Subsystems) != 1 || len(st.Subsystems[0].Namespaces) != 1 || s.cfg.Subsystems[0].Namespaces[0].ANAGroup != 1 {
		t.Fatalf("after the refusals: %+v", st.Subsystems)
	}
	// A namespace in a managed group is accepted.
	if err := guardReload(t, tg, func(c *Config) error {
		n := memNS(2, "1MiB")
		n.ANAGroup = 2
		_, _, err := c.AddNamespace(testSubNQN, n)
		return err
	}); err != nil {
		t.Fatalf("a namespace in managed group 2: %v", err)
	}
	if st := view(2); st != nvmeof.ANAInaccessible {
		t.Errorf("managed group 2 after the reload: %v, want inaccessible", st)
	}
}

// TestGatewayGuardRunningConfig: the guard checks the running
// configuration when it is set, and a start with the guard set.
func TestGatewayGuardRunningConfig(t *testing.T) {
	ns1 := memNS(1, "1MiB")
	ns1.ANAGroup = 7
	s := startServer(t, testConfig(t, ns1))
	err := (&Target{s: s}).SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}})
	wantGuardRefusal(t, "SetGatewayGuard on a configuration with group 7", err, "subsystems[0].namespaces[0].ana_group")
	if s.guard.Load() != nil {
		t.Fatal("the guard was set anyway")
	}

	tg, err := New(testConfig(t, ns1), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err == nil {
		t.Fatal("SetGatewayGuard before Start accepted group 7")
	}
	tg.s.guard.Store(&GatewayGuard{ANAGroups: []uint32{1}})
	err = tg.Start(context.Background())
	defer tg.Shutdown(context.Background())
	wantGuardRefusal(t, "Start with group 7", err, "subsystems[0].namespaces[0].ana_group")
	if !strings.Contains(err.Error(), "ANA group 7 is not one of the gateway's") {
		t.Errorf("Start: %v", err)
	}
}

// TestValidateRBDImageOnce: an RBD image is one namespace of the
// configuration (two would be two writers); another image, the same name
// in another pool or RADOS namespace, or a disabled namespace is not a
// duplicate.
func TestValidateRBDImageOnce(t *testing.T) {
	rbd := func(nsid uint32, pool, rns, image string) NamespaceConfig {
		return NamespaceConfig{NSID: nsid, Backend: BackendConfig{Kind: "rbd", Pool: pool, RADOSNamespace: rns, Image: image}}
	}
	off := rbd(6, "rbd", "", "vm1")
	disabled := false
	off.Enabled = &disabled
	cfg := testConfig(t, rbd(1, "rbd", "", "vm1"), rbd(2, "rbd", "", "vm2"), rbd(3, "other", "", "vm1"), rbd(4, "rbd", "t", "vm1"),
		rbd(5, "rbd", "", "vm1"), off)
	cfg.ApplyDefaults()
	err := cfg.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "subsystems[0].namespaces[4].backend.image" {
		t.Fatalf("Validate: %v, want one problem at subsystems[0].namespaces[4].backend.image", err)
	}
	t.Logf("%v", ve.Problems[0])
}
