package backend_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/backend/backendtest"
)

// TestCheck: Config.Check refuses what Open would refuse, names the field,
// and creates nothing (issue 11: --check-config said "valid" for each of
// the bad paths below).
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.img")
	if err := os.WriteFile(existing, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.img")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	loopA, loopB := filepath.Join(dir, "loopA"), filepath.Join(dir, "loopB")
	if err := os.Symlink(loopB, loopA); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(loopA, loopB); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		cfg   backend.Config
		field string // "" for no problem
		words string // in the reason
	}{
		{"existing file", backend.Config{Kind: "file", Path: existing}, "", ""},
		{"existing file grown", backend.Config{Kind: "file", Path: existing, Size: 1 << 20}, "", ""},
		{"new file", backend.Config{Kind: "file", Path: filepath.Join(dir, "new.img"), Size: 1 << 20}, "", ""},
		{"new file, new dirs", backend.Config{Kind: "file", Path: filepath.Join(dir, "a/b/new.img"), Size: 1 << 20, CreateDirs: true}, "", ""},
		{"memory", backend.Config{Kind: "memory", Size: 1 << 20}, "", ""},

		{"directory", backend.Config{Kind: "file", Path: dir, Size: 1 << 20}, "path", "is a directory"},
		{"/dev/zero", backend.Config{Kind: "file", Path: "/dev/zero", Size: 1 << 20}, "path", "character device"},
		{"symlink loop", backend.Config{Kind: "file", Path: loopA, Size: 1 << 20}, "path", "symlink loop"},
		{"missing parent", backend.Config{Kind: "file", Path: filepath.Join(dir, "nodir/x.img"), Size: 1 << 20}, "path", "create_dirs"},
		{"parent is a file", backend.Config{Kind: "file", Path: filepath.Join(existing, "x.img"), Size: 1 << 20, CreateDirs: true}, "path", "not a directory"},
		{"must_exist", backend.Config{Kind: "file", Path: filepath.Join(dir, "none.img"), MustExist: true}, "path", "must_exist"},
		{"missing, no size", backend.Config{Kind: "file", Path: filepath.Join(dir, "none.img")}, "size", "no size"},
		{"missing, read_only", backend.Config{Kind: "file", Path: filepath.Join(dir, "none.img"), Size: 4096, ReadOnly: true}, "path", "read_only"},
		{"empty, no size", backend.Config{Kind: "file", Path: empty}, "size", "empty"},
		{"shrink", backend.Config{Kind: "file", Path: existing, Size: 4096}, "size", "never shrunk"},
		{"read-only grow", backend.Config{Kind: "file", Path: existing, Size: 1 << 20, ReadOnly: true}, "size", "does not grow"},
		{"block on a missing device", backend.Config{Kind: "block", Path: "/dev/nvmetd-no-such-device"}, "path", "does not exist"},
		{"block on a file", backend.Config{Kind: "block", Path: existing}, "path", "use kind file"},
		{"block on /dev/zero", backend.Config{Kind: "block", Path: "/dev/zero"}, "path", "not a block device"},
		{"invalid", backend.Config{Kind: "memory"}, "size", "positive multiple"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := listTree(t, dir)
			err := c.cfg.Check()
			if after := listTree(t, dir); after != before {
				t.Errorf("Check changed the file system:\nbefore %s\nafter  %s", before, after)
			}
			if c.field == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var ce *backend.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Check = %v, want a *ConfigError on %s", err, c.field)
			}
			if ce.Field != c.field || !strings.Contains(ce.Reason, c.words) {
				t.Fatalf("Check = %v, want field %s with %q", err, c.field, c.words)
			}
			// What Check refuses, Open refuses too.
			if b, err := backend.Open(c.cfg); err == nil {
				b.Close()
				t.Errorf("Open succeeded where Check refused")
			}
		})
	}
}

// TestCheckBlock checks a block device's size and block size against the
// device, opening it read-only.
func TestCheckBlock(t *testing.T) {
	dev, _ := backendtest.LoopDevice(t, 8<<20, 4096)
	if err := (&backend.Config{Kind: "block", Path: dev}).Check(); err != nil {
		t.Fatalf("Check %s: %v", dev, err)
	}
	for _, c := range []struct {
		cfg   backend.Config
		field string
	}{
		{backend.Config{Kind: "block", Path: dev, Size: 16 << 20}, "size"},
		{backend.Config{Kind: "block", Path: dev, BlockSize: 512}, "block_size"},
	} {
		err := c.cfg.Check()
		var ce *backend.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("Check(%+v) = %v, want a problem with %s", c.cfg, err, c.field)
		}
	}
	// Check takes no claim: it passes while an exclusive opener holds the
	// device, as a reload's check does while the running namespace does.
	b, err := backend.Open(backend.Config{Kind: "block", Path: dev, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := (&backend.Config{Kind: "block", Path: dev, Exclusive: true}).Check(); err != nil {
		t.Errorf("Check while held exclusively: %v", err)
	}
}

// TestDeferClaim: a backend opened with DeferClaim takes its claim only on
// Claim, so a reload can open a namespace's new backend while the old one
// still holds the file lock or the exclusive open.
func TestDeferClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	old, err := backend.Open(backend.Config{Kind: "file", Path: path, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Open(backend.Config{Kind: "file", Path: path}); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("second open without DeferClaim: %v, want ErrBusy", err)
	}
	nb, err := backend.Open(backend.Config{Kind: "file", Path: path, DeferClaim: true})
	if err != nil {
		t.Fatalf("open with DeferClaim: %v", err)
	}
	defer nb.Close()
	cl, ok := nb.(backend.Claimer)
	if !ok {
		t.Fatalf("%T is not a Claimer", nb)
	}
	if err := cl.Claim(); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("Claim while the old backend is open: %v, want ErrBusy", err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Claim(); err != nil {
		t.Fatalf("Claim after the old backend closed: %v", err)
	}
	if _, err := backend.Open(backend.Config{Kind: "file", Path: path}); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("open after Claim: %v, want ErrBusy", err)
	}

	t.Run("block", func(t *testing.T) {
		dev, _ := backendtest.LoopDevice(t, 4<<20, 512)
		old, err := backend.Open(backend.Config{Kind: "block", Path: dev, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		nb, err := backend.Open(backend.Config{Kind: "block", Path: dev, Exclusive: true, DeferClaim: true})
		if err != nil {
			t.Fatalf("open with DeferClaim: %v", err)
		}
		defer nb.Close()
		if err := nb.(backend.Claimer).Claim(); !errors.Is(err, backend.ErrBusy) {
			t.Fatalf("Claim while held: %v, want ErrBusy", err)
		}
		old.Close()
		if err := nb.(backend.Claimer).Claim(); err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if _, err := backend.Open(backend.Config{Kind: "block", Path: dev, Exclusive: true}); !errors.Is(err, backend.ErrBusy) {
			t.Fatalf("exclusive open after Claim: %v, want ErrBusy", err)
		}
	})
}

// TestMemoryTooLarge: a memory backend larger than the machine is refused
// with an error, not a fatal out-of-memory (issue 11: 1000 TiB killed the
// daemon).
func TestMemoryTooLarge(t *testing.T) {
	phys := backend.PhysicalMemory()
	if phys <= 0 {
		t.Skip("sysinfo does not report the physical memory here")
	}
	_, err := backend.Open(backend.Config{Kind: "memory", Size: 1000 << 40})
	var ce *backend.ConfigError
	if !errors.As(err, &ce) || ce.Field != "size" {
		t.Fatalf("Open 1000TiB memory: %v, want a size error", err)
	}
}

// listTree lists the names under dir, to see that Check creates nothing.
func listTree(t *testing.T, dir string) string {
	var names []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		names = append(names, p)
		return nil
	})
	return strings.Join(names, " ")
}
