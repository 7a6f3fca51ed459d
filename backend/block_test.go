package backend_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

func openBlock(t *testing.T, dev string, opts backend.BlockOptions) *backend.Block {
	t.Helper()
	b, err := backend.OpenBlock(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBlockGeometry(t *testing.T) {
	for _, lbs := range []uint32{512, 4096} {
		t.Run(sizeName(lbs), func(t *testing.T) {
			dev, backing := loopDevice(t, 16<<20, lbs)
			b := openBlock(t, dev, backend.BlockOptions{})
			info := b.Info()
			if b.BlockSize() != lbs || b.Size() != 16<<20 {
				t.Errorf("block size %d, size %d; want %d and 16 MiB", b.BlockSize(), b.Size(), lbs)
			}
			if info.Kind != backend.KindBlock || info.Bus != "loop" || info.ID != "loop:"+backing ||
				!info.Direct || info.BufferAlign == 0 || info.BufferAlign > 4096 || info.PhysicalBlockSize < lbs {
				t.Errorf("Info: %+v", info)
			}
			if !info.Discard || info.DiscardZeroes || !info.WriteZeroesOffload {
				t.Errorf("loop device capabilities: discard %v, discard zeroes %v, write zeroes offload %v",
					info.Discard, info.DiscardZeroes, info.WriteZeroesOffload)
			}
			b.Close()

			// A larger exported block size, and a prefix of the device.
			b = openBlock(t, dev, backend.BlockOptions{BlockSize: 4096, Size: 4 << 20})
			if b.BlockSize() != 4096 || b.Size() != 4<<20 {
				t.Errorf("with options: block size %d, size %d; want 4096 and 4 MiB", b.BlockSize(), b.Size())
			}
			if err := b.WriteAt(make([]byte, 4096), 4<<20, false); !errors.Is(err, backend.ErrOutOfRange) {
				t.Errorf("write past the exported prefix: %v, want ErrOutOfRange", err)
			}
		})
	}
}

func TestBlockOpenErrors(t *testing.T) {
	dev512, _ := loopDevice(t, 8<<20, 512)
	dev4k, _ := loopDevice(t, 8<<20, 4096)
	file := filepath.Join(t.TempDir(), "f.img")
	os.WriteFile(file, make([]byte, 4096), 0o600)
	for _, c := range []struct {
		name string
		path string
		opts backend.BlockOptions
		want string
	}{
		{"block size below the device's", dev4k, backend.BlockOptions{BlockSize: 512}, "backend: block_size: 512 is smaller than the logical block size 4096 of " + dev4k},
		{"bad block size", dev512, backend.BlockOptions{BlockSize: 2048}, "backend: block_size: 2048 is not 512 or 4096"},
		{"size beyond the device", dev512, backend.BlockOptions{Size: 16 << 20}, "backend: size: 16777216 (16MiB) is larger than " + dev512 + ", which has 8388608 bytes (8MiB)"},
		{"size not a block multiple", dev4k, backend.BlockOptions{Size: 4096 + 512}, "backend: size: 4608 is not a positive multiple of block size 4096"},
		{"regular file", file, backend.BlockOptions{}, "not a block device"},
		{"missing", "/dev/does-not-exist", backend.BlockOptions{}, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := backend.OpenBlock(c.path, c.opts)
			if err == nil {
				b.Close()
				t.Fatal("OpenBlock succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OpenBlock: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

func TestBlockExclusive(t *testing.T) {
	dev, _ := loopDevice(t, 8<<20, 512)
	openBlock(t, dev, backend.BlockOptions{Exclusive: true})
	if b, err := backend.OpenBlock(dev, backend.BlockOptions{Exclusive: true}); !errors.Is(err, backend.ErrBusy) {
		if err == nil {
			b.Close()
		}
		t.Fatalf("second exclusive open: %v, want ErrBusy", err)
	}
}

// TestBlockBounce: page-aligned buffers go straight to O_DIRECT, others
// through the bounce pool, with the same results.
func TestBlockBounce(t *testing.T) {
	for _, lbs := range []uint32{512, 4096} {
		t.Run(sizeName(lbs), func(t *testing.T) {
			dev, _ := loopDevice(t, 8<<20, lbs)
			b := openBlock(t, dev, backend.BlockOptions{})
			aligned := pageBuffer(t, 1<<20)
			for i := range aligned {
				aligned[i] = byte(i * 7)
			}
			if err := b.WriteAt(aligned, 0, false); err != nil {
				t.Fatal(err)
			}
			if s := b.Stats(); s.BounceWrites != 0 {
				t.Fatalf("aligned write bounced: %+v", s)
			}
			// 1 MiB + one block, at an odd address: more than one bounce buffer.
			n := 1<<20 + int(lbs)
			odd := make([]byte, n+3)[3:]
			if err := b.ReadAt(odd[:1<<20], 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(odd[:1<<20], aligned) {
				t.Fatal("bounced read differs from the aligned write")
			}
			copy(odd, bytes.Repeat([]byte{0x3c}, n))
			if err := b.WriteAt(odd, 2<<20, true); err != nil {
				t.Fatal(err)
			}
			got := pageBuffer(t, n)
			if err := b.ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, odd) {
				t.Fatalf("aligned read of a bounced write: %v, equal %v", err, bytes.Equal(got, odd))
			}
			if s := b.Stats(); s.BounceReads != 1 || s.BounceWrites != 1 {
				t.Errorf("stats %+v, want one bounced read and one bounced write", s)
			}
		})
	}
}

// TestBlockDeallocation: on a loop device, deallocating WriteZeroes and
// Discard punch holes in the backing file; plain WriteZeroes keeps it
// allocated.
func TestBlockDeallocation(t *testing.T) {
	for _, c := range []struct {
		name string
		op   func(b *backend.Block, off, n int64) error
		free bool
	}{
		{"WriteZeroes", func(b *backend.Block, off, n int64) error { return b.WriteZeroes(off, n, false) }, false},
		{"WriteZeroesDeallocate", func(b *backend.Block, off, n int64) error { return b.WriteZeroes(off, n, true) }, true},
		{"Discard", (*backend.Block).Discard, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, backing := loopDevice(t, 8<<20, 512)
			b := openBlock(t, dev, backend.BlockOptions{})
			p := pageBuffer(t, 8<<20)
			for i := range p {
				p[i] = 0xee
			}
			if err := b.WriteAt(p, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			before := allocatedBytes(t, backing)
			if err := c.op(b, 2<<20, 4<<20); err != nil {
				t.Fatal(err)
			}
			after := allocatedBytes(t, backing)
			if c.free && before-after < 4<<20 {
				t.Errorf("backing file: %d bytes allocated before, %d after; want 4 MiB freed", before, after)
			}
			if !c.free && after < before {
				t.Errorf("backing file: %d bytes allocated before, %d after; want the space kept", before, after)
			}
			got := p[:4<<20]
			if err := b.ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, make([]byte, 4<<20)) {
				t.Errorf("range reads zeroes: %v, %v", err, bytes.Equal(got, make([]byte, 4<<20)))
			}
		})
	}
}

func TestBlockZeroFallback(t *testing.T) {
	dev, _ := loopDevice(t, 8<<20, 4096)
	b := openBlock(t, dev, backend.BlockOptions{})
	backend.DisableZeroOffload(b)
	backend.DisableRWFDSYNC(b)
	p := pageBuffer(t, 4<<20)
	for i := range p {
		p[i] = 0x11
	}
	if err := b.WriteAt(p, 0, true); err != nil { // FUA through the O_DSYNC descriptor
		t.Fatal(err)
	}
	if err := b.WriteZeroes(1<<20, 2<<20, true); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{0x11}, 4<<20)
	clear(want[1<<20 : 3<<20])
	if !bytes.Equal(p, want) {
		t.Fatal("zeroes written by the fallback read back wrong")
	}
	if s := b.Stats(); s.ZeroFallbacks != 1 {
		t.Errorf("ZeroFallbacks = %d, want 1", s.ZeroFallbacks)
	}
}

func TestBlockHealthLoop(t *testing.T) {
	dev, _ := loopDevice(t, 8<<20, 512)
	b := openBlock(t, dev, backend.BlockOptions{})
	h, err := b.Health()
	if err != nil || h.Available || !strings.Contains(h.Reason, "loop device") {
		t.Errorf("Health of a loop device: %+v, %v; want not available, reason naming the loop device, no error", h, err)
	}
	if _, err := b.HealthReport(); !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "loop device") {
		t.Errorf("HealthReport of a loop device: %v; want ErrNotSupported with the reason", err)
	}
}

// TestBlockVirtio opens the machine's virtio disk, if it has one,
// read-only, and checks its identity and that it reports no health
// quietly. It reads no data.
func TestBlockVirtio(t *testing.T) {
	var dev string
	for _, name := range []string{"vda", "vdb", "vdc"} {
		if drv, err := os.Readlink("/sys/class/block/" + name + "/device/driver"); err == nil && filepath.Base(drv) == "virtio_blk" {
			dev = "/dev/" + name
			break
		}
	}
	if dev == "" {
		t.Skip("no virtio_blk disk (vda, vdb, vdc) on this machine")
	}
	b, err := backend.OpenBlock(dev, backend.BlockOptions{ReadOnly: true})
	if err != nil {
		t.Skipf("cannot open %s read-only: %v", dev, err)
	}
	defer b.Close()
	info := b.Info()
	if info.Bus != "virtio" || info.ID == "" {
		t.Errorf("Info of %s: %+v", dev, info)
	}
	t.Logf("%s: model %q serial %q wwn %q id %q rotational %v volatile cache %v", dev, info.Model, info.Serial, info.WWN, info.ID, info.Rotational, info.VolatileCache)
	h, err := b.Health()
	if err != nil || h.Available || !strings.Contains(h.Reason, "virtio") {
		t.Errorf("Health of %s: %+v, %v", dev, h, err)
	}
}
