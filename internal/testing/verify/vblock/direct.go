//go:build linux

package vblock

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// directAlign is the alignment of O_DIRECT buffers, offsets and lengths:
// a page, which covers every logical block size up to 4 KiB.
const directAlign = 4096

// Direct is a Linux block device (or file) opened with O_DIRECT, as a
// careful application opens the multipath disk of an NVMe namespace
// (/dev/nvmeXnY): every write goes to the device, none stays in the page
// cache, so a write that returned is one the device acknowledged. It is a
// PathDevice whose one path is the device's name (the kernel picks the
// controller; the completions' times still give the stalls, Gaps), and an
// Aligner (O_DIRECT wants aligned buffers).
type Direct struct {
	file // ReadAtContext, WriteAtContext, Size
}

// OpenDirect opens the block device or file at path for reading and
// writing with O_DIRECT.
func OpenDirect(path string) (*Direct, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("verify: open %s with O_DIRECT: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("verify: size of %s: %w", path, err)
	}
	return &Direct{file{f: f, size: size}}, nil
}

// Close closes the device.
func (d *Direct) Close() error { return d.f.Close() }

// Name is the device's path.
func (d *Direct) Name() string { return d.f.Name() }

// Buffer returns n bytes aligned for O_DIRECT.
func (d *Direct) Buffer(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % directAlign); r != 0 {
		skip = directAlign - r
	}
	return b[skip : skip+n : skip+n]
}

// ReadAtPath is ReadAtContext, its path the device's name.
func (d *Direct) ReadAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	_, err := d.ReadAtContext(ctx, p, off)
	return d.f.Name(), err
}

// WriteAtPath is WriteAtContext, its path the device's name.
func (d *Direct) WriteAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	_, err := d.WriteAtContext(ctx, p, off)
	return d.f.Name(), err
}
