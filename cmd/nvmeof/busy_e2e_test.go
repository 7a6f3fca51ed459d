package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
)

// TestE2EBusyDisconnect (issue 23.5): a disconnect of a namespace whose
// filesystem is in use said "nothing disconnected" without saying why and
// advised umount -l and losetup -d of a loop device under a live mount.
// Now it names the processes that hold the filesystem, says what is still
// connected and mounted, and gives the safe order; with --force, what is
// left is described truly (the loop device under a lazily unmounted
// filesystem still in use is not to be detached by hand).
func TestE2EBusyDisconnect(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	loop := e.list()[0].Namespaces[0].Loop
	if err := writeFileSync(filepath.Join(mnt, "f"), []byte("data")); err != nil {
		t.Fatal(err)
	}
	// Two users of the filesystem: one working in it, one with a file open.
	inDir := exec.Command("sleep", "600")
	inDir.Dir = mnt
	f, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	withFile := exec.Command("sleep", "601")
	withFile.Dir = "/"
	withFile.Stdin = f
	for _, c := range []*exec.Cmd{inDir, withFile} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	f.Close()

	out, err := e.run("disconnect", "-n", tg.NQN)
	if err == nil {
		t.Fatalf("disconnect of a busy mount succeeded:\n%s", out)
	}
	msg := err.Error()
	for _, want := range []string{
		"cannot unmount " + mnt,
		"process " + strconv.Itoa(inDir.Process.Pid) + " (sleep): working directory " + mnt,
		"process " + strconv.Itoa(withFile.Process.Pid) + " (sleep): open file " + filepath.Join(mnt, "f"),
		"Not disconnected: nvme0 is still connected",
		"Never detach " + loop + " (losetup -d) while " + mnt + " is mounted",
		"then run the disconnect again",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("disconnect's answer lacks %q:\n%s", want, msg)
		}
	}
	badAdvice(t, msg)
	// And it is true: everything is still up.
	l := e.list()
	if len(l) != 1 || l[0].State != "live" || l[0].Namespaces[0].Mount != mnt || l[0].Namespaces[0].Loop != loop {
		t.Fatalf("after the refused disconnect: %+v", l)
	}
	if !hostfs.IsMounted(mnt) || hostfs.LoopBacking(loop) == "" {
		t.Fatalf("after the refused disconnect: mounted %v, %s backing %q", hostfs.IsMounted(mnt), loop, hostfs.LoopBacking(loop))
	}

	// --force: lazily unmounted; the loop device stays under the
	// filesystem the sleeps still hold, and is reported so.
	out, err = e.run("disconnect", "-n", tg.NQN, "--force")
	bf, _ := os.ReadFile("/sys/block/" + filepath.Base(loop) + "/loop/backing_file")
	t.Logf("disconnect --force: %v\n%s\nbacking %q", err, out, bf)
	all := out
	if err != nil {
		all += err.Error()
	}
	badAdvice(t, all)
	if hostfs.LoopBacking(loop) != "" && !strings.Contains(all, loop+" still attached") {
		t.Errorf("%s is still attached and disconnect --force does not say so:\n%s", loop, all)
	}
	if strings.Contains(all, loop+" still attached") && !strings.Contains(all, "do not losetup -d") {
		t.Errorf("disconnect --force does not say to leave %s alone:\n%s", loop, all)
	}
}

// badAdvice fails the test if msg advises losetup -d or umount -l
// without saying not to, or without the warning.
func badAdvice(t *testing.T, msg string) {
	t.Helper()
	for _, l := range strings.Split(msg, "\n") {
		if strings.Contains(l, "losetup -d") && !strings.Contains(l, "ever detach") && !strings.Contains(l, "do not losetup -d") &&
			!strings.Contains(l, "never losetup -d") && !strings.Contains(l, "nothing mounts it") {
			t.Errorf("advises losetup -d: %s", l)
		}
		if strings.Contains(l, "umount -l") && !strings.Contains(l, "fail") {
			t.Errorf("advises umount -l without the warning: %s", l)
		}
	}
}

// TestE2EDisconnectStandbyOnly (issue 23.15): a host connected only to a
// standby gateway (its ANA group inaccessible there) wrote nothing, yet
// disconnect's Flush waited for a usable path until its deadline and
// ended with "flush namespace 1: ... context deadline exceeded". Now the
// flush is skipped, and the log says why.
func TestE2EDisconnectStandbyOnly(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	port := freePort(t)
	img := filepath.Join(e.dir, "ns1.img")
	mpNvmetd(e, "standby", port, mpTargetConfig(filepath.Join(e.dir, "s.sock"), []int{port}, []string{"inaccessible"}, 1, 0xFFEF, img))
	e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(port), "-n", testNQN)
	e.waitPaths("live inaccessible")
	logPath := e.list()[0].Log
	out := e.must("disconnect", "-d", "nvme0")
	if !strings.Contains(out, "nvme0: disconnected") {
		t.Fatalf("disconnect: %s", out)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "flush namespace") {
		t.Errorf("disconnect waited on a Flush no path could carry:\n%s", b)
	}
	if !strings.Contains(string(b), "no flush: no usable path and nothing written") {
		t.Errorf("the log does not say why there was no flush:\n%s", b)
	}
}
