//go:build rbd

package target

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// rbdNS is a namespace on image of cluster c.
func rbdNS(c *cephtest.Cluster, nsid uint32, image string) NamespaceConfig {
	return NamespaceConfig{NSID: nsid, ANAGroup: 1, Backend: BackendConfig{
		Kind: "rbd", Pool: c.Pool, Image: image, CephConf: c.Conf, ClientID: c.ClientID, Keyring: c.Keyring, OpTimeout: 5 * time.Second,
	}}
}

// wantField checks that err is a refused reload with a problem at field
// whose reason contains want.
func wantField(t *testing.T, what string, err error, field, want string) {
	t.Helper()
	var ve *ValidationError
	if !errors.Is(err, ErrReloadRefused) || !errors.As(err, &ve) {
		t.Fatalf("%s: %v, want a refused reload", what, err)
	}
	for _, p := range ve.Problems {
		if p.Field == field && strings.Contains(p.Reason, want) {
			t.Logf("%s: refused: %v", what, p)
			return
		}
	}
	t.Fatalf("%s: %v, want %q at %s", what, err, want, field)
}

// TestRBDNamespaceClaim: the target's rbd namespaces claim their image.
// In one target an image already served as namespace 1 is refused as
// namespace 3 (a reload or a management edit: nothing changes), while a
// change of namespace 1 itself reopens it on the same image. The namespace
// holds librbd's exclusive lock while its ANA group is served optimized,
// so another client (another gateway, a stand-alone nvmetd) cannot write;
// once the target is a gateway's the group is inaccessible and the lock
// is released, and taken again when the group becomes optimized. In a
// gateway an image without the exclusive-lock feature is refused, naming
// the command that enables it (ErrGatewayGuard, backend.ErrNoExclusiveLock).
func TestRBDNamespaceClaim(t *testing.T) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 8<<20)
	other, err := backend.OpenRBD(backend.RBDOptions{Pool: c.Pool, Image: image, CephConf: c.Conf, ClientID: c.ClientID,
		Keyring: c.Keyring, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	block := make([]byte, 4096)
	otherWrite := func() error { return other.WriteAt(block, 0, false) }

	s := startServer(t, testConfig(t, rbdNS(c, 1, image)))
	tg := &Target{s: s}
	// Stand-alone, group 1 is optimized: namespace 1 holds the lock.
	if err := otherWrite(); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "exclusive lock is held") {
		t.Fatalf("another client's write while the target serves the image: %v, want ErrUnavailable (the lock)", err)
	}

	// The same image as namespace 3: refused by the validation (the
	// daemon's Validate, and Reload's own), nothing changes.
	nc := s.cfg.Clone()
	if _, _, err := nc.AddNamespace(testSubNQN, rbdNS(c, 3, image)); err != nil {
		t.Fatal(err)
	}
	err = tg.Reload(nc)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "subsystems[0].namespaces[1].backend.image" ||
		!strings.Contains(ve.Problems[0].Reason, "is also the image of subsystems[0].namespaces[0]") {
		t.Fatalf("the image of namespace 1 as namespace 3: %v, want the validation naming backend.image", err)
	}
	t.Logf("the image of namespace 1 as namespace 3: %v", ve.Problems[0])
	// The same image through another ceph.conf path (the validation
	// cannot tell): refused by the backend's claim.
	conf := filepath.Join(t.TempDir(), "ceph.conf")
	if err := os.Symlink(c.Conf, conf); err != nil {
		t.Fatal(err)
	}
	err = guardReload(t, tg, func(c2 *Config) error {
		n := rbdNS(c, 3, image)
		n.Backend.CephConf = conf
		_, _, err := c2.AddNamespace(testSubNQN, n)
		return err
	})
	wantField(t, "the image of namespace 1 as namespace 3 through another ceph.conf", err, "subsystems[0].namespaces[1].backend", "already open in this process")
	if n := len(s.subsystems[testSubNQN].ns.Load().byID); n != 1 {
		t.Fatalf("%d namespaces after the refusals", n)
	}
	// Namespace 1 changed on the same image: reopened (claim deferred).
	if err := guardReload(t, tg, func(c2 *Config) error {
		c2.Subsystems[0].Namespaces[0].Backend.OpTimeout = 6 * time.Second
		return nil
	}); err != nil {
		t.Fatalf("namespace 1 changed on the same image: %v", err)
	}
	ns, _ := s.subsystems[testSubNQN].ns.Load().lookup(1)
	if ns == nil {
		t.Fatal("no namespace 1")
	}
	if err := ns.be.WriteAt(block, 0, false); err != nil {
		t.Fatalf("write through the reopened namespace 1: %v", err)
	}
	ns.put()

	// A gateway: group 1 is inaccessible here, the lock released.
	if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	if err := other.SetWritable(true); err != nil {
		t.Fatalf("another client takes the lock once the gateway's group is inaccessible: %v", err)
	}
	if err := otherWrite(); err != nil {
		t.Fatal(err)
	}
	if err := other.SetWritable(false); err != nil {
		t.Fatal(err)
	}
	// The gateway owns group 1 (its ANA state on the port): it takes the
	// lock.
	if err := guardReload(t, tg, func(c2 *Config) error {
		c2.Ports[0].ANAGroups = []ANAGroupConfig{{ID: 1, State: "optimized"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.SetWritable(true); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("another client's lock while the gateway owns the group: %v, want ErrUnavailable", err)
	}

	// An image without exclusive-lock, in a gateway: refused.
	plain := c.CreateImage(t, 8<<20)
	if out, err := c.RBD("feature", "disable", c.Pool+"/"+plain, "fast-diff", "object-map", "exclusive-lock"); err != nil {
		t.Fatalf("rbd feature disable: %v\n%s", err, out)
	}
	err = guardReload(t, tg, func(c2 *Config) error {
		_, _, err := c2.AddNamespace(testSubNQN, rbdNS(c, 2, plain))
		return err
	})
	wantField(t, "an image without exclusive-lock in a gateway", err, "subsystems[0].namespaces[1].backend",
		"rbd feature enable "+c.Pool+"/"+plain+" exclusive-lock")
	// Typed: the management API answers 409 on ErrGatewayGuard.
	if !errors.Is(err, ErrGatewayGuard) || !errors.Is(err, backend.ErrNoExclusiveLock) {
		t.Fatalf("an image without exclusive-lock in a gateway: %v, want ErrGatewayGuard and backend.ErrNoExclusiveLock", err)
	}
}
