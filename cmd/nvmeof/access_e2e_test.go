package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 22.1: who may reach a connected namespace on this host. Only the
// user who connected it (root): the FUSE device files are checked by the
// kernel against their real mode (default_permissions, 0600, owned by the
// daemon's user) and by Open against the caller; the filesystem --mount
// puts on top is nosuid,nodev.

// asNobody runs name args as uid/gid 65534 without supplementary groups
// and returns its combined output and error.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("needs setpriv (util-linux) to act as an unprivileged user: %v", err)
	}
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", name}, args...)...)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestE2ENamespaceFileOtherUser: as root connect a namespace (with a
// mount); as nobody read the device file, write a block to it: both fail
// with EACCES (before the fix nobody read the data, wrote a block and read
// it back). The namespace's filesystem is mounted nosuid,nodev.
func TestE2ENamespaceFileOtherUser(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	// The runtime directory as on a real machine (/run/nvmeof is 0755):
	// the attacker can reach the device file; only its own checks stop it.
	if err := os.Chmod(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	l := e.list()
	if len(l) != 1 || len(l[0].Namespaces) != 1 {
		t.Fatalf("list: %+v", l)
	}
	file := l[0].Namespaces[0].File
	// The write goes to the first 512 bytes, which ext4 leaves unused (its
	// superblock is at 1024): harmless if the check is missing.
	out, err := asNobody(t, "dd", "if="+file, "of=/dev/null", "bs=4096", "count=1")
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody read the namespace's device file %s: err %v\n%s", file, err, out)
	}
	out, err = asNobody(t, "dd", "if=/dev/zero", "of="+file, "bs=512", "count=1", "conv=notrunc")
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody wrote a block to the namespace's device file %s: err %v\n%s", file, err, out)
	}
	// Root (the user who connected) still reads it.
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("root cannot open %s: %v", file, err)
	}
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Errorf("root cannot read %s: %v", file, err)
	}
	f.Close()
	opts := mountInfoOptions(t, mnt)
	for _, want := range []string{"nosuid", "nodev"} {
		if !opts[want] {
			t.Errorf("%s is mounted without %s: %v", mnt, want, opts)
		}
	}
	fuseDir := filepath.Dir(file)
	fopts := mountInfoOptions(t, fuseDir)
	for _, want := range []string{"nosuid", "nodev", "default_permissions"} {
		if !fopts[want] {
			t.Errorf("FUSE %s is mounted without %s: %v", fuseDir, want, fopts)
		}
	}
	e.must("disconnect", "-d", "nvme0")
}

// mountInfoOptions returns the options (VFS and superblock) of the mount on
// dir, from /proc/self/mountinfo.
func mountInfoOptions(t *testing.T, dir string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var opts map[string]bool
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 || f[4] != dir {
			continue
		}
		opts = map[string]bool{}
		for _, o := range strings.Split(f[5], ",") {
			opts[o] = true
		}
		// After the separator: fstype, source, superblock options.
		for i := 6; i < len(f); i++ {
			if f[i] == "-" && i+3 < len(f) {
				for _, o := range strings.Split(f[i+3], ",") {
					opts[o] = true
				}
				break
			}
		}
	}
	if opts == nil {
		t.Fatalf("%s is not mounted", dir)
	}
	return opts
}
