package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator/fusedev"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
)

// The host tool's guards (issue 11): no mistake of an admin loses data or
// hangs.

// TestE2EBenchRefusesMounted: bench over a namespace whose ext4 is mounted
// destroyed the filesystem without a word; now it is refused unless
// --force, through the controller (-d) and through a connection of its own
// (-a -n), and the filesystem is intact.
func TestE2EBenchRefusesMounted(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "128MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	sums := writeTree(t, mnt, 20, 64<<10, 3)

	out, err := e.run("bench", "-d", "nvme0", "--rw", "write", "--runtime", "1s")
	if err == nil || !strings.Contains(err.Error(), "nvme0n1 is in use (mounted on "+mnt) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("bench -d on a mounted namespace: %v\n%s", err, out)
	}
	out, err = e.run("bench", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--rw", "write", "--runtime", "1s")
	if err == nil || !strings.Contains(err.Error(), "already attached on this host as nvme0n1") {
		t.Fatalf("bench -a -n on an attached namespace: %v\n%s", err, out)
	}
	// A load that only reads cannot harm the filesystem: it runs without
	// --force (issue 23.14: it was refused), through the controller and
	// through a connection of its own; a verified read load writes its
	// pattern first and is refused.
	e.must("bench", "-d", "nvme0", "--rw", "randread", "--runtime", "200ms")
	e.must("bench", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--rw", "read", "--runtime", "200ms")
	if out, err := e.run("bench", "-d", "nvme0", "--rw", "randread", "--verify", "--runtime", "200ms"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("bench --verify on a mounted namespace: %v\n%s", err, out)
	}
	e.must("bench", "-d", "nvme0", "--rw", "randread", "--runtime", "200ms", "--force")
	checkTree(t, mnt, sums)
	e.must("disconnect", "-d", "nvme0")
}

// TestE2ERemovedNamespaceDisconnect: a namespace removed by a reload while
// mounted; disconnect returned 0 and left the mount and the loop device
// behind. Now it takes them down.
func TestE2ERemovedNamespaceDisconnect(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	loop := e.list()[0].Namespaces[0].Loop

	// Remove the namespace from nvmetd's configuration and reload.
	b, err := os.ReadFile(tg.cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "    namespaces:")
	if err := os.WriteFile(tg.cfg, b[:i], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tg.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		l := e.list()
		if len(l) == 1 && len(l[0].Namespaces) == 1 && l[0].Namespaces[0].Gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host never saw the namespace removed: %+v", l)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The filesystem sees I/O errors now; the admin disconnects.
	_ = os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644)
	out, err := e.run("disconnect", "-d", "nvme0", "-o", "json")
	if err != nil {
		t.Fatalf("disconnect: %v\n%s", err, out)
	}
	if m, _ := os.ReadFile("/proc/self/mounts"); strings.Contains(string(m), mnt) {
		t.Fatalf("%s still mounted after disconnect (%s)", mnt, out)
	}
	if hostfs.LoopBacking(loop) != "" {
		t.Fatalf("%s still attached after disconnect (%s)", loop, out)
	}
	if len(e.list()) != 0 {
		t.Fatal("controller still listed")
	}
}

// TestE2EForeignMountNamespaceDisconnect: another mount namespace holding a
// copy of the FUSE mount made disconnect wait forever (Server.Unmount
// waits for the FUSE server, which the other copy keeps alive). Now the
// FUSE teardown gives up on the unmount after fusedev.UnmountRetry, detaches
// it and aborts the connection, and disconnect finishes within its bound.
func TestE2EForeignMountNamespaceDisconnect(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("needs unshare (util-linux): %v", err)
	}
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN)
	fuseDir := filepath.Join(e.state, "nvme0", "dev")

	// A process in a mount namespace of its own, with a private copy of
	// every mount, the FUSE one included (what `ip netns exec` or a
	// container start does).
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		holder.Process.Kill()
		holder.Wait()
	})
	nsMounts := fmt.Sprintf("/proc/%d/mounts", holder.Process.Pid)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, _ := os.ReadFile(nsMounts); strings.Contains(string(m), fuseDir) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other mount namespace has no copy of the FUSE mount")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The stated bound of the FUSE teardown (fusedev.UnmountRetry, then the
	// lazy unmount and fusedev.ServeEnd twice at most) plus the flush and
	// close (30 s): disconnect must be done well within disconnectAnswer.
	bound := fusedev.UnmountRetry + 2*fusedev.ServeEnd + 30*time.Second
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := e.run("disconnect", "-d", "nvme0")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("disconnect: %v", err)
		}
	case <-time.After(bound + 30*time.Second):
		t.Fatalf("disconnect did not finish within %s", bound)
	}
	t.Logf("disconnect with a foreign mount namespace holding the FUSE mount took %s (bound %s)", time.Since(start).Round(time.Millisecond), bound)
	if len(e.list()) != 0 {
		t.Fatal("controller still listed")
	}
}
