package backend_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  backend.Config
		want string // "" for valid
	}{
		{backend.Config{Kind: "memory", Size: 1 << 20}, ""},
		{backend.Config{Kind: "null", Size: 4096, BlockSize: 4096, Pattern: []byte{0xff}}, ""},
		{backend.Config{Kind: "file", Path: "/x"}, ""},
		{backend.Config{Kind: "file", Path: "/x", Size: 1 << 30, Direct: true, CreateDirs: true, NoLock: true}, ""},
		{backend.Config{Kind: "block", Path: "/dev/x", Exclusive: true, DriveDB: "/etc/drivedb.yaml"}, ""},
		{backend.Config{Kind: "block", Path: "/dev/x", Direct: true}, ""},

		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1"}, ""},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", RADOSNamespace: "tenant", CephConf: "/etc/ceph/x.conf",
			ClientID: "nvmetd", Keyring: "/etc/ceph/x.keyring", BlockSize: 4096, ReadOnly: true,
			OpTimeout: 5 * time.Second, ConnectTimeout: time.Minute}, ""},

		{backend.Config{}, "backend: kind: missing (want file, block, null, memory or rbd)"},
		{backend.Config{Kind: "ram"}, `backend: kind: "ram" is not one of file, block, null, memory, rbd`},
		{backend.Config{Kind: "rbd", Image: "vm1"}, "backend: pool: required for kind rbd"},
		{backend.Config{Kind: "rbd", Pool: "rbd"}, "backend: image: required for kind rbd"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "a/b"}, `backend: image: "a/b": image names cannot contain '/', '@' or NUL`},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1@snap"}, `backend: image: "vm1@snap": image names cannot contain '/', '@' or NUL`},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", RADOSNamespace: "x/y"}, `backend: rados_namespace: "x/y": RADOS namespace names cannot contain '/', '@' or NUL`},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", Path: "/dev/rbd0"}, "backend: path: not used by kind rbd"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", Size: 1 << 30}, "backend: size: not used by kind rbd: the image's size is the capacity (rbd resize changes it)"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", ClientID: "client.nvmetd"}, `backend: client_id: "client.nvmetd": give the id without "client." ("nvmetd")`},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", OpTimeout: -time.Second}, "backend: op_timeout: -1s is out of range (0 for the default, or up to 1h0m0s)"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", ConnectTimeout: 2 * time.Hour}, "backend: connect_timeout: 2h0m0s is out of range (0 for the default, or up to 1h0m0s)"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", BlockSize: 2048}, "backend: block_size: 2048 is not 512 or 4096"},
		{backend.Config{Kind: "rbd", Pool: "rbd", Image: "vm1", Direct: true}, "backend: direct: not used by kind rbd"},
		{backend.Config{Kind: "file", Path: "/x", Pool: "rbd"}, "backend: pool: only used by kind rbd"},
		{backend.Config{Kind: "memory", Size: 4096, Keyring: "/k"}, "backend: keyring: only used by kind rbd"},
		{backend.Config{Kind: "block", Path: "/dev/x", OpTimeout: time.Second}, "backend: op_timeout: only used by kind rbd"},
		{backend.Config{Kind: "file"}, "backend: path: required for kind file"},
		{backend.Config{Kind: "block"}, "backend: path: required for kind block"},
		{backend.Config{Kind: "memory", Path: "/x", Size: 512}, "backend: path: not used by kind memory"},
		{backend.Config{Kind: "memory"}, "backend: size: 0 is not a positive multiple of block size 512"},
		{backend.Config{Kind: "null", Size: -512}, "backend: size: -512 is not a positive multiple of block size 512"},
		{backend.Config{Kind: "memory", Size: 1000}, "backend: size: 1000 is not a positive multiple of block size 512"},
		{backend.Config{Kind: "memory", Size: 512, BlockSize: 4096}, "backend: size: 512 is not a positive multiple of block size 4096"},
		{backend.Config{Kind: "file", Path: "/x", Size: 513}, "backend: size: 513 is not a positive multiple of block size 512"},
		{backend.Config{Kind: "memory", Size: 4096, BlockSize: 1024}, "backend: block_size: 1024 is not 512 or 4096"},
		{backend.Config{Kind: "memory", Size: 4096, Direct: true}, "backend: direct: not used by kind memory"},
		{backend.Config{Kind: "null", Size: 4096, CreateDirs: true}, "backend: create_dirs: only used by kind file"},
		{backend.Config{Kind: "block", Path: "/x", MustExist: true}, "backend: must_exist: only used by kind file"},
		{backend.Config{Kind: "memory", Size: 4096, NoLock: true}, "backend: no_lock: only used by kind file"},
		{backend.Config{Kind: "file", Path: "/x", MustExist: true, CreateDirs: true}, "backend: create_dirs: contradicts must_exist"},
		{backend.Config{Kind: "file", Path: "/x", Exclusive: true}, "backend: exclusive: only used by kind block"},
		{backend.Config{Kind: "file", Path: "/x", DriveDB: "db"}, "backend: drive_db: only used by kind block"},
		{backend.Config{Kind: "memory", Size: 4096, Pattern: []byte{1}}, "backend: pattern: only used by kind null"},
		{backend.Config{Kind: "file", Path: "/x", NoFill: true}, "backend: no_fill: only used by kind null"},
		{backend.Config{Kind: "null", Size: 4096, Pattern: make([]byte, 4097)}, "backend: pattern: 4097 bytes is longer than the limit of 4096"},
	} {
		err := c.cfg.Validate()
		name := fmt.Sprintf("kind %q path %q size %d block size %d", c.cfg.Kind, c.cfg.Path, c.cfg.Size, c.cfg.BlockSize)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", name, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s: %v, want %q", name, err, c.want)
		case err != nil:
			var ce *backend.ConfigError
			if !errors.As(err, &ce) || ce.Field == "" {
				t.Errorf("%s: %T is not a *ConfigError with a field", name, err)
			}
		}
	}
}

func TestOpen(t *testing.T) {
	dev, _ := loopDevice(t, 8<<20, 512)
	for _, cfg := range []backend.Config{
		{Kind: "memory", Size: 1 << 20},
		{Kind: "null", Size: 1 << 20, Pattern: []byte("ab")},
		{Kind: "file", Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20, BlockSize: 4096},
		{Kind: "block", Path: dev},
	} {
		b, err := backend.Open(cfg)
		if err != nil {
			t.Errorf("Open(%+v): %v", cfg, err)
			continue
		}
		if b.Info().Kind != cfg.Kind {
			t.Errorf("Open(%+v) made a %s backend", cfg, b.Info().Kind)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	// A failed open returns a nil interface, not a typed nil pointer.
	for _, cfg := range []backend.Config{
		{Kind: "memory"},
		{Kind: "file", Path: filepath.Join(t.TempDir(), "missing.img"), MustExist: true},
		{Kind: "block", Path: filepath.Join(t.TempDir(), "missing")},
	} {
		if b, err := backend.Open(cfg); err == nil || b != nil {
			t.Errorf("Open(%+v) = %v, %v; want nil and an error", cfg, b, err)
		}
	}
}

// TestNullNoFill: no_fill reaches the null backend, which then leaves a
// read buffer as it was.
func TestNullNoFill(t *testing.T) {
	b, err := backend.Open(backend.Config{Kind: "null", Size: 1 << 20, NoFill: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := bytes.Repeat([]byte{0xa5}, 4096)
	if err := b.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, bytes.Repeat([]byte{0xa5}, 4096)) {
		t.Error("a no_fill read changed the buffer")
	}
}

func TestNullPattern(t *testing.T) {
	n, err := backend.OpenNull(backend.NullOptions{Size: 1 << 30, Pattern: []byte("abc")})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p := make([]byte, 200<<10)
	off := int64(3 * 512) // phase 0
	for _, off := range []int64{off, off + 512} {
		if err := n.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
		for i, c := range p {
			if want := "abc"[(off+int64(i))%3]; c != want {
				t.Fatalf("byte %d of a read at %d is %q, want %q", i, off, c, want)
			}
		}
	}
	if n.Info().DiscardZeroes {
		t.Errorf("DiscardZeroes with a pattern")
	}
}

func TestMemorySparse(t *testing.T) {
	m, err := backend.OpenMemory(backend.MemoryOptions{Size: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := make([]byte, 4096)
	for _, off := range []int64{0, 1<<40 - 4096, 1<<20 - 2048} { // the last spans two chunks
		if err := m.WriteAt(p, off, false); err != nil {
			t.Fatal(err)
		}
	}
	if a := m.Stats().AllocatedBytes; a != 3*backend.MemoryChunkSize {
		t.Fatalf("allocated %d bytes after writing into 3 chunks", a)
	}
	if err := m.Discard(0, 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteZeroes(1<<40-(1<<20), 1<<20, false); err != nil {
		t.Fatal(err)
	}
	if a := m.Stats().AllocatedBytes; a != 0 {
		t.Fatalf("allocated %d bytes after discarding everything", a)
	}
}

// TestMemoryOverlappingIO: a host may read and write the same blocks at
// once (NVMe leaves their order undefined); for the memory backend that
// must not be a data race of this process (go test -race).
func TestMemoryOverlappingIO(t *testing.T) {
	m, err := backend.OpenMemory(backend.MemoryOptions{Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const off, n = 1<<20 - 8192, 16384 // across a chunk boundary
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, n)
			for i := range 200 {
				if (i+w)%2 == 0 {
					for j := range buf {
						buf[j] = byte(w)
					}
					if err := m.WriteAt(buf, off, false); err != nil {
						t.Error(err)
						return
					}
				} else if err := m.ReadAt(buf, off); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					if err := m.WriteZeroes(off, 4096, false); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestErrUnavailable: ErrUnavailable matches ErrClosed (the target's path
// error) but not the other way round.
func TestErrUnavailable(t *testing.T) {
	err := fmt.Errorf("backend rbd rbd/x: read: %w", backend.ErrUnavailable)
	if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, backend.ErrClosed) {
		t.Errorf("%v: does not match ErrUnavailable and ErrClosed", err)
	}
	if errors.Is(backend.ErrClosed, backend.ErrUnavailable) {
		t.Errorf("ErrClosed matches ErrUnavailable")
	}
}
