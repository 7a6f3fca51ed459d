//go:build rbd

package gateway_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/gateway"
)

// TestGroupConfigCompareAndSet: the group's configuration in RADOS,
// versioned. The first member seeds version 1 (a second seed finds it);
// two changes on the same base version at once: exactly one is stored
// (version 2), the other is refused with the version it lost to and
// nothing of it is stored; a watcher of the config object is notified; a
// member's running version is read back; an unversioned configuration
// (a group of gateways that keep it in their files) is moved to version 1
// when it agrees with this gateway's file and refused when it differs.
func TestGroupConfigCompareAndSet(t *testing.T) {
	f := newFixture(t)
	dial := func(group string, watch bool) *gateway.RADOS {
		t.Helper()
		cl, err := gateway.DialRADOS(gateway.RADOSOptions{CephConf: f.c.Conf, ClientID: f.c.ClientID, Keyring: f.c.Keyring,
			Pool: f.c.Pool, GroupName: group, Groups: []uint32{1}, Lease: 4 * time.Second, WatchConfig: watch})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	a, b := dial(f.group, true), dial(f.group, true)
	sc, err := a.LoadGroupConfig([]byte("seed a\n"), "lease 4s\n", "legacy\n")
	if err != nil || sc.Version != 1 || string(sc.Config) != "seed a\n" {
		t.Fatalf("seed: %+v %v", sc, err)
	}
	sc, err = b.LoadGroupConfig([]byte("seed b\n"), "lease 4s\n", "legacy\n")
	if err != nil || sc.Version != 1 || string(sc.Config) != "seed a\n" {
		t.Fatalf("the second member's load: %+v %v", sc, err)
	}
	// Drain the notifications of the seed.
	drain := func(cl *gateway.RADOS) {
		for {
			select {
			case <-cl.ConfigChanged():
			case <-time.After(500 * time.Millisecond):
				return
			}
		}
	}
	drain(b)
	var wg sync.WaitGroup
	var errs [2]error
	var vers [2]uint64
	for i, cl := range []*gateway.RADOS{a, b} {
		wg.Go(func() { vers[i], errs[i] = cl.WriteGroupConfig(1, []byte("change "+string(rune('a'+i))+"\n"), "") })
	}
	wg.Wait()
	won := -1
	for i := range 2 {
		switch {
		case errs[i] == nil && vers[i] == 2:
			if won >= 0 {
				t.Fatalf("both changes stored: %v %v", vers, errs)
			}
			won = i
		case errors.Is(errs[i], gateway.ErrVersionConflict):
			var vc *gateway.VersionConflictError
			if !errors.As(errs[i], &vc) || vc.Base != 1 || vc.Current != 2 {
				t.Fatalf("the lost change's error: %v", errs[i])
			}
			t.Logf("lost: %v", errs[i])
		default:
			t.Fatalf("change %d: version %d, %v", i, vers[i], errs[i])
		}
	}
	if won < 0 {
		t.Fatalf("no change stored: %v", errs)
	}
	sc, err = a.ReadGroupConfig()
	if want := "change " + string(rune('a'+won)) + "\n"; err != nil || sc.Version != 2 || string(sc.Config) != want {
		t.Fatalf("stored: %+v %v (want version 2, %q)", sc, err, want)
	}
	select {
	case <-b.ConfigChanged():
	case <-time.After(hang):
		t.Fatal("b's watch of the config object was not notified")
	}
	if err := b.SetRunning("gw-b", 2); err != nil {
		t.Fatal(err)
	}
	if sc, err = a.ReadGroupConfig(); err != nil || sc.Running["gw-b"] != 2 {
		t.Fatalf("running versions: %+v %v", sc.Running, err)
	}
	out := admin(t, f.c, "rados", "-p", f.c.Pool, "get", gateway.ConfigObjectName(f.group), "-")
	if out != "00000000000000000002" {
		t.Fatalf("rados get of the config object: %q", out)
	}

	// An unversioned configuration (gateways keeping it in their files
	// wrote it with CheckConfig).
	legacy := f.group + "l"
	l := dial(legacy, false)
	if ok, diff, err := l.CheckConfig("legacy\n"); !ok || err != nil {
		t.Fatalf("CheckConfig: %v %s %v", ok, diff, err)
	}
	m := dial(legacy, true)
	if _, err := m.LoadGroupConfig([]byte("seed\n"), "lease 4s\n", "other\n"); !errors.Is(err, gateway.ErrLegacyConfig) ||
		!strings.Contains(err.Error(), "here only: other") {
		t.Fatalf("a file that differs from the unversioned configuration: %v", err)
	}
	if sc, err := m.LoadGroupConfig([]byte("seed\n"), "lease 4s\n", "legacy\n"); err != nil || sc.Version != 1 || string(sc.Config) != "seed\n" {
		t.Fatalf("moved to version 1: %+v %v", sc, err)
	}
	if ok, diff, err := m.CheckConfig("lease 4s\n"); !ok || err != nil {
		t.Fatalf("the agreement text after the move: %v %s %v", ok, diff, err)
	}
}
