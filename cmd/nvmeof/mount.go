package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// toolTimeout bounds one run of a system tool (losetup, mount, umount,
// mkfs): a teardown step never waits forever on one.
const toolTimeout = 30 * time.Second

// run runs a system tool and returns its trimmed stdout, or an error with
// its stderr.
func runTool(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// attachLoop attaches file to a free loop device with the namespace's
// logical block size as the loop's sector size, so that every request the
// loop sends is block aligned.
func attachLoop(file string, blockSize int, directIO bool) (string, error) {
	dio := "off"
	if directIO {
		dio = "on"
	}
	return runTool("losetup", "--find", "--show", "--sector-size", strconv.Itoa(blockSize), "--direct-io="+dio, file)
}

// detachLoop detaches a loop device.
func detachLoop(dev string) error {
	_, err := runTool("losetup", "--detach", dev)
	return err
}

// loopDirectIO reports whether the kernel really uses direct I/O on the
// loop device (it falls back to buffered I/O when the file cannot do it).
func loopDirectIO(dev string) bool {
	b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/loop/dio")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// makeFS makes a filesystem on dev.
func makeFS(fstype, dev string) error {
	args := []string{dev}
	switch fstype {
	case "ext4", "ext3", "ext2":
		args = []string{"-F", "-q", dev}
	case "xfs":
		args = []string{"-f", "-q", dev}
	}
	_, err := runTool("mkfs."+fstype, args...)
	return err
}

// defaultMountOptions come before the user's --mount-options (issue
// 22.1): the namespace's data is not trusted to carry set-user-ID programs
// or device nodes, since whoever can write its blocks (the target, another
// host of the subsystem) would otherwise be root here. mount(8) applies
// options in order, so an explicit "suid" or "dev" in --mount-options
// turns them back on.
const defaultMountOptions = "nosuid,nodev"

// mountOptions returns the -o argument for the user's options.
func mountOptions(opts string) string {
	if opts == "" {
		return defaultMountOptions
	}
	return defaultMountOptions + "," + opts
}

// mountFS mounts dev on dir, nosuid and nodev unless opts says otherwise.
func mountFS(fstype, dev, dir, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"-t", fstype, "-o", mountOptions(opts)}
	_, err := runTool("mount", append(args, dev, dir)...)
	if err != nil && (strings.Contains(err.Error(), "wrong fs type") || strings.Contains(err.Error(), "bad superblock")) {
		return fmt.Errorf("%w\n(no %s filesystem on the namespace yet? add --mkfs to make one: it erases the namespace)", err, fstype)
	}
	return err
}

// unmountFS unmounts dir.
func unmountFS(dir string) error {
	_, err := runTool("umount", dir)
	return err
}

// isMounted reports whether dir is a mount point (/proc/self/mounts).
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return true // cannot tell: try to unmount
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}
