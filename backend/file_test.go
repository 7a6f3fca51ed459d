package backend_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"golang.org/x/sys/unix"
)

func openFile(t *testing.T, path string, opts backend.FileOptions) *backend.File {
	t.Helper()
	f, err := backend.OpenFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileCreateSparse(t *testing.T) {
	const size = 1 << 40
	path := filepath.Join(t.TempDir(), "big.img")
	f := openFile(t, path, backend.FileOptions{Size: size, BlockSize: 4096})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != size || f.Size() != size {
		t.Fatalf("file size %d, backend size %d, want %d", st.Size(), f.Size(), size)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if a := allocatedBytes(t, path); a > 1<<20 {
		t.Errorf("a new 1 TiB file occupies %d bytes; want it sparse", a)
	}
	p := bytes.Repeat([]byte("end!"), 1024)
	if err := f.WriteAt(p, size-4096, true); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// Reopening with size 0 takes the file's size; the data is there.
	f = openFile(t, path, backend.FileOptions{BlockSize: 4096})
	got := make([]byte, 4096)
	if err := f.ReadAt(got, size-4096); err != nil || !bytes.Equal(got, p) || f.Size() != size {
		t.Fatalf("after reopen: size %d, ReadAt %v, data equal %v", f.Size(), err, bytes.Equal(got, p))
	}
}

func TestFileGrowNeverShrink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	data := bytes.Repeat([]byte{0xa5}, 4096)
	f := openFile(t, path, backend.FileOptions{Size: 1 << 20})
	if err := f.WriteAt(data, 0, false); err != nil {
		t.Fatal(err)
	}
	f.Close()

	f = openFile(t, path, backend.FileOptions{Size: 4 << 20})
	got := make([]byte, 4096)
	if err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after growing: %v, data kept %v", err, bytes.Equal(got, data))
	}
	if err := f.ReadAt(got, 4<<20-4096); err != nil || !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatalf("grown tail: %v, zeroes %v", err, bytes.Equal(got, make([]byte, 4096)))
	}
	f.Close()

	_, err := backend.OpenFile(path, backend.FileOptions{Size: 2 << 20})
	if err == nil || !strings.Contains(err.Error(), "4194304") || !strings.Contains(err.Error(), "2097152") ||
		!strings.Contains(err.Error(), "shrink") {
		t.Fatalf("opening a 4 MiB file with size 2 MiB: %v; want a refusal naming both sizes", err)
	}
	if st, _ := os.Stat(path); st.Size() != 4<<20 {
		t.Fatalf("refused open changed the file size to %d", st.Size())
	}
	_, err = backend.OpenFile(path, backend.FileOptions{Size: 8 << 20, ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only open with a larger size: %v; want a refusal", err)
	}
}

func TestFileOpenErrors(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd.img")
	os.WriteFile(odd, make([]byte, 1000), 0o600)
	empty := filepath.Join(dir, "empty.img")
	os.WriteFile(empty, nil, 0o600)

	for _, c := range []struct {
		name string
		path string
		opts backend.FileOptions
		want string
		is   error
	}{
		{"missing without size", filepath.Join(dir, "new.img"), backend.FileOptions{}, "no size", fs.ErrNotExist},
		{"missing, must exist", filepath.Join(dir, "new.img"), backend.FileOptions{Size: 1 << 20, MustExist: true}, "no such file", fs.ErrNotExist},
		{"missing, read-only", filepath.Join(dir, "new.img"), backend.FileOptions{Size: 1 << 20, ReadOnly: true}, "no such file", fs.ErrNotExist},
		{"missing parent", filepath.Join(dir, "a", "b", "new.img"), backend.FileOptions{Size: 1 << 20}, "no such file", fs.ErrNotExist},
		{"size not a block multiple", odd, backend.FileOptions{}, "not a multiple of block size 512", nil},
		{"empty", empty, backend.FileOptions{}, "empty", nil},
		{"directory", dir, backend.FileOptions{}, "", nil},
		{"character device", "/dev/null", backend.FileOptions{}, "not a regular file", nil},
		{"bad block size", odd, backend.FileOptions{BlockSize: 1024}, "backend: block_size: 1024 is not 512 or 4096", nil},
		{"bad size", odd, backend.FileOptions{Size: 1000}, "backend: size: 1000 is not a positive multiple of block size 512", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := backend.OpenFile(c.path, c.opts)
			if err == nil {
				f.Close()
				t.Fatalf("OpenFile succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("OpenFile: %v; want an error containing %q matching %v", err, c.want, c.is)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "new.img")); err == nil {
		t.Errorf("a failed OpenFile left a file behind")
	}
}

func TestFileCreateDirs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "ns.img")
	openFile(t, path, backend.FileOptions{Size: 1 << 20, CreateDirs: true})
	st, err := os.Stat(filepath.Dir(path))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("parent: %v, mode %v; want created with 0700", err, st.Mode().Perm())
	}
}

func TestFileLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	openFile(t, path, backend.FileOptions{Size: 1 << 20})
	for _, opts := range []backend.FileOptions{{}, {ReadOnly: true}} {
		if f, err := backend.OpenFile(path, opts); !errors.Is(err, backend.ErrBusy) {
			if err == nil {
				f.Close()
			}
			t.Errorf("second open (read-only %v) of a file open read-write: %v, want ErrBusy", opts.ReadOnly, err)
		}
	}
	openFile(t, path, backend.FileOptions{NoLock: true})

	ro := filepath.Join(t.TempDir(), "ro.img")
	openFile(t, ro, backend.FileOptions{Size: 1 << 20}).Close()
	openFile(t, ro, backend.FileOptions{ReadOnly: true})
	openFile(t, ro, backend.FileOptions{ReadOnly: true}) // shared locks coexist
	if _, err := backend.OpenFile(ro, backend.FileOptions{}); !errors.Is(err, backend.ErrBusy) {
		t.Errorf("read-write open of a file open read-only: %v, want ErrBusy", err)
	}
}

func TestFileInfo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ns.img")
	link := filepath.Join(dir, "link.img")
	openFile(t, path, backend.FileOptions{Size: 1 << 20}).Close()
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	a := openFile(t, link, backend.FileOptions{NoLock: true}).Info()
	b := openFile(t, path, backend.FileOptions{NoLock: true, Direct: true, ReadOnly: true}).Info()
	if a.ID != b.ID || a.ID == "" {
		t.Errorf("IDs through a symlink and directly differ: %q, %q", a.ID, b.ID)
	}
	if a.Kind != backend.KindFile || a.Path != link || a.Direct || a.ReadOnly || !a.Discard || !a.DiscardZeroes || !a.VolatileCache || a.BufferAlign != 1 {
		t.Errorf("Info of a buffered read-write file: %+v", a)
	}
	if !b.Direct || !b.ReadOnly || b.Discard || b.BufferAlign < 512 {
		t.Errorf("Info of a direct read-only file: %+v", b)
	}
	if h, err := openFile(t, path, backend.FileOptions{NoLock: true}).Health(); err != nil || h.Available || h.Reason == "" {
		t.Errorf("Health of a file: %+v, %v", h, err)
	}
}

// TestFileDeallocation checks that deallocating WriteZeroes and Discard
// give space back, and that plain WriteZeroes keeps it.
func TestFileDeallocation(t *testing.T) {
	dirs := map[string]string{"ext4": t.TempDir()}
	if d, err := mkdirTemp(t, "/dev/shm"); err == nil {
		dirs["tmpfs"] = d
	}
	for fsName, dir := range dirs {
		for _, c := range []struct {
			name string
			op   func(f *backend.File, off, n int64) error
			free bool
		}{
			{"WriteZeroes", func(f *backend.File, off, n int64) error { return f.WriteZeroes(off, n, false) }, false},
			{"WriteZeroesDeallocate", func(f *backend.File, off, n int64) error { return f.WriteZeroes(off, n, true) }, true},
			{"Discard", (*backend.File).Discard, true},
		} {
			t.Run(fsName+"/"+c.name, func(t *testing.T) {
				path := filepath.Join(dir, c.name+".img")
				f := openFile(t, path, backend.FileOptions{Size: 8 << 20})
				if err := f.WriteAt(bytes.Repeat([]byte{1}, 8<<20), 0, false); err != nil {
					t.Fatal(err)
				}
				if err := f.Flush(); err != nil {
					t.Fatal(err)
				}
				before := allocatedBytes(t, path)
				if err := c.op(f, 2<<20, 4<<20); err != nil {
					t.Fatal(err)
				}
				after := allocatedBytes(t, path)
				if c.free && before-after < 4<<20 {
					t.Errorf("allocated %d bytes before, %d after; want 4 MiB freed", before, after)
				}
				if !c.free && after < before {
					t.Errorf("allocated %d bytes before, %d after; want the space kept", before, after)
				}
				got := make([]byte, 4<<20)
				if err := f.ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, make([]byte, 4<<20)) {
					t.Errorf("range reads zeroes: %v, %v", err, bytes.Equal(got, make([]byte, 4<<20)))
				}
				if s := f.Stats(); s.ZeroFallbacks != 0 {
					t.Errorf("ZeroFallbacks = %d; the file system can zero without writing", s.ZeroFallbacks)
				}
			})
		}
	}
}

// TestFileZeroFallbacks forces the paths taken on file systems that lack
// FALLOC_FL_ZERO_RANGE, or hole punching too.
func TestFileZeroFallbacks(t *testing.T) {
	for _, c := range []struct {
		name    string
		disable func(*backend.File)
		written bool // zeroes written rather than offloaded
	}{
		{"NoZeroRange", backend.DisableZeroRange, false},
		{"NoOffload", func(f *backend.File) { backend.DisableZeroOffload(f) }, true},
	} {
		for _, dealloc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/deallocate=%v", c.name, dealloc), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "ns.img")
				f := openFile(t, path, backend.FileOptions{Size: 4 << 20})
				c.disable(f)
				if err := f.WriteAt(bytes.Repeat([]byte{1}, 4<<20), 0, false); err != nil {
					t.Fatal(err)
				}
				if err := f.WriteZeroes(1<<20, 2<<20, dealloc); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 4<<20)
				if err := f.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				want := bytes.Repeat([]byte{1}, 4<<20)
				clear(want[1<<20 : 3<<20])
				if !bytes.Equal(got, want) {
					t.Errorf("WriteZeroes(deallocate=%v): wrong contents", dealloc)
				}
				if n := f.Stats().ZeroFallbacks; (n == 1) != c.written {
					t.Errorf("ZeroFallbacks = %d", n)
				}
				if c.written {
					if err := f.Discard(0, 4096); !errors.Is(err, backend.ErrNotSupported) {
						t.Errorf("Discard without hole punching: %v, want ErrNotSupported", err)
					}
				}
			})
		}
	}
}

func TestFileFUAFallback(t *testing.T) {
	for _, direct := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "ns.img")
		f := openFile(t, path, backend.FileOptions{Size: 1 << 20, Direct: direct})
		backend.DisableRWFDSYNC(f)
		p := pageBuffer(t, 8192)
		copy(p, "durable")
		if err := f.WriteAt(p, 4096, true); err != nil {
			t.Fatalf("FUA write through O_DSYNC descriptor (direct %v): %v", direct, err)
		}
		got := make([]byte, 8192)
		if err := f.ReadAt(got, 4096); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("read back (direct %v): %v", direct, err)
		}
	}
}

func TestFileBounce(t *testing.T) {
	for _, direct := range []bool{false, true} {
		f := openFile(t, filepath.Join(t.TempDir(), "ns.img"), backend.FileOptions{Size: 4 << 20, Direct: direct})
		aligned := pageBuffer(t, 1<<20)
		odd := make([]byte, 1<<20+1)[1:]
		copy(odd, bytes.Repeat([]byte("x"), len(odd)))
		for _, p := range [][]byte{aligned, odd} {
			if err := f.WriteAt(p, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := f.ReadAt(p, 0); err != nil {
				t.Fatal(err)
			}
		}
		s := f.Stats()
		want := uint64(0)
		if direct {
			want = 1 // only the misaligned buffer, and only with O_DIRECT
		}
		if s.BounceReads != want || s.BounceWrites != want {
			t.Errorf("direct %v: bounce reads %d writes %d, want %d", direct, s.BounceReads, s.BounceWrites, want)
		}
	}
}

// TestFileReadError: a file shrunk behind the backend's back makes reads
// past its new end fail as read errors.
func TestFileReadError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	f := openFile(t, path, backend.FileOptions{Size: 1 << 20})
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	err := f.ReadAt(make([]byte, 8192), 0)
	var ioe *backend.IOError
	if !errors.As(err, &ioe) || !ioe.Op.IsRead() || !errors.Is(err, io.ErrUnexpectedEOF) || ioe.Off != 0 || ioe.Len != 8192 {
		t.Fatalf("ReadAt past the shrunk end: %v; want an *IOError for a read wrapping io.ErrUnexpectedEOF", err)
	}
	if !strings.Contains(err.Error(), "backend file "+path+": read at 0 length 8192") {
		t.Errorf("error text %q lacks context", err)
	}
}

// TestFileWriteError fills a small tmpfs so that writes fail with ENOSPC.
func TestFileWriteError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("mounting a small tmpfs needs root; running as uid %d", os.Geteuid())
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a 1 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	f := openFile(t, filepath.Join(dir, "ns.img"), backend.FileOptions{Size: 16 << 20})
	err := f.WriteAt(make([]byte, 4<<20), 0, false)
	var ioe *backend.IOError
	if !errors.As(err, &ioe) || ioe.Op != backend.OpWrite || ioe.Op.IsRead() || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("WriteAt beyond the file system's space: %v; want an *IOError for a write wrapping ENOSPC", err)
	}
}

// TestFileNowait: TryReadAt and TryWriteAt serve a buffered file from the
// page cache and return what ReadAt and WriteAt would; they decline FUA
// and O_DIRECT (those wait for the device) without touching the file.
func TestFileNowait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	f := openFile(t, path, backend.FileOptions{Size: 1 << 20})
	want := bytes.Repeat([]byte("nowait!!"), 512)
	// A write RWF_NOWAIT may decline (a file system without buffered
	// NOWAIT writes); then the plain write stands in.
	done, err := f.TryWriteAt(want, 8192, false)
	if err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Logf("buffered RWF_NOWAIT write declined on this file system")
		if err := f.WriteAt(want, 8192, false); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(want))
	done, err = f.TryReadAt(got, 8192)
	if err != nil || !done {
		t.Fatalf("TryReadAt of data just written: done %v, %v", done, err)
	}
	if !bytes.Equal(got, want) {
		t.Error("TryReadAt returned other data than was written")
	}
	if done, err := f.TryWriteAt(want, 0, true); done || err != nil {
		t.Errorf("TryWriteAt with FUA: done %v, %v; want it declined", done, err)
	}
	if done, err := f.TryReadAt(got, 1<<20); !done || !errors.Is(err, backend.ErrOutOfRange) {
		t.Errorf("TryReadAt past the end: done %v, %v; want ErrOutOfRange", done, err)
	}
	if st := f.Stats(); st.NowaitDone == 0 {
		t.Errorf("Stats %+v: no NOWAIT call counted", st)
	}
	d, err := backend.OpenFile(path, backend.FileOptions{Direct: true, NoLock: true})
	if err != nil {
		t.Skipf("O_DIRECT not available here: %v", err)
	}
	defer d.Close()
	if done, err := d.TryReadAt(got, 8192); done || err != nil {
		t.Errorf("TryReadAt with O_DIRECT: done %v, %v; want it declined", done, err)
	}
}

// TestFileNoAtime: reading a namespace does not update its file's access
// time, even where relatime would (an access time older than the
// modification time).
func TestFileNoAtime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	if err := os.WriteFile(path, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, old, time.Now()); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path, backend.FileOptions{})
	buf := make([]byte, 4096)
	if err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TryReadAt(buf, 4096); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(old) {
		t.Errorf("access time %v after reads, want it left at %v", got, old)
	}
}
