package backendtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopDevice attaches a new loop device with the given logical block size
// over a sparse file of size bytes, and detaches it when the test ends. It
// returns the device node and the backing file. Without root, or where loop
// devices cannot be made, the test is skipped with the reason.
func LoopDevice(t testing.TB, size int64, blockSize uint32) (dev, backing string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("loop devices need root (CAP_SYS_ADMIN); running as uid %d", os.Geteuid())
	}
	backing = filepath.Join(t.TempDir(), "loop.img")
	bf, err := os.OpenFile(backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	if err := bf.Truncate(size); err != nil {
		t.Fatal(err)
	}
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("cannot create loop devices: open /dev/loop-control: %v", err)
	}
	defer unix.Close(ctl)

	for range 32 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Skipf("cannot create loop devices: LOOP_CTL_GET_FREE: %v", err)
		}
		dev = fmt.Sprintf("/dev/loop%d", n)
		if _, err := os.Stat(dev); errors.Is(err, os.ErrNotExist) {
			// No udev/devtmpfs node yet (containers): make one.
			if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err != nil && err != unix.EEXIST {
				t.Skipf("cannot create loop devices: mknod %s: %v", dev, err)
			}
		}
		lfd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open %s: %v", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(bf.Fd()), Size: blockSize}
		copy(cfg.Info.File_name[:], backing)
		err = unix.IoctlLoopConfigure(lfd, &cfg)
		if err == unix.EBUSY { // another test took it first
			unix.Close(lfd)
			continue
		}
		if err != nil {
			unix.Close(lfd)
			t.Skipf("cannot create loop devices: LOOP_CONFIGURE on %s: %v", dev, err)
		}
		t.Cleanup(func() {
			if err := unix.IoctlSetInt(lfd, unix.LOOP_CLR_FD, 0); err != nil {
				t.Errorf("detach %s: %v", dev, err)
			}
			unix.Close(lfd)
		})
		return dev, backing
	}
	t.Fatalf("no free loop device after 32 attempts")
	return "", ""
}
