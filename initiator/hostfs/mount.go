package hostfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
func RunTool(name string, args ...string) (string, error) {
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

// AttachLoop attaches file to a free loop device with the namespace's
// logical block size as the loop's sector size, so that every request the
// loop sends is block aligned.
func AttachLoop(file string, blockSize int, directIO bool) (string, error) {
	dio := "off"
	if directIO {
		dio = "on"
	}
	return RunTool("losetup", "--find", "--show", "--sector-size", strconv.Itoa(blockSize), "--direct-io="+dio, file)
}

// DetachLoop detaches a loop device.
func DetachLoop(dev string) error {
	_, err := RunTool("losetup", "--detach", dev)
	return err
}

// LoopDirectIO reports whether the kernel really uses direct I/O on the
// loop device (it falls back to buffered I/O when the file cannot do it).
func LoopDirectIO(dev string) bool {
	b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/loop/dio")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// Signatures --mkfs refuses to write over (issue 23.1): a filesystem or a
// partition table found by blkid -p (low-level probing, no cache) and by
// reading the well-known magic numbers here, so that the check holds
// without blkid too.
type signature struct {
	off   int64
	magic string
	what  string
}

var knownSignatures = []signature{
	{0x438, "\x53\xef", "an ext2/ext3/ext4 filesystem"}, // s_magic 0xEF53 at 1024+56
	{0, "XFSB", "an XFS filesystem"},
	{0x10040, "_BHRfS_M", "a btrfs filesystem"},
	{4096 - 10, "SWAPSPACE2", "a swap area"},
	{4096 - 10, "SWAP-SPACE", "a swap area"},
	{65536 - 10, "SWAPSPACE2", "a swap area (64 KiB pages)"},
	{512, "EFI PART", "a GPT partition table"},
	{4096, "EFI PART", "a GPT partition table (4 KiB sectors)"},
	{510, "\x55\xaa", "an MBR (DOS partition table or boot sector)"},
	{512, "LABELONE", "an LVM physical volume"},
	{0, "LUKS\xba\xbe", "a LUKS encrypted volume"},
}

// probeSignatures returns what the known magic numbers of r say it holds.
func probeSignatures(r io.ReaderAt) []string {
	var found []string
	seen := map[string]bool{}
	for _, s := range knownSignatures {
		b := make([]byte, len(s.magic))
		if n, _ := r.ReadAt(b, s.off); n == len(b) && string(b) == s.magic && !seen[s.what] {
			seen[s.what] = true
			found = append(found, s.what)
		}
	}
	return found
}

// blkidProbe returns what blkid -p finds on dev ("TYPE=ext4",
// "PTTYPE=gpt", ...); none if blkid is missing or finds nothing (exit 2).
func blkidProbe(dev string) []string {
	if _, err := exec.LookPath("blkid"); err != nil {
		return nil
	}
	out, err := RunTool("blkid", "-p", "-o", "export", dev)
	if err != nil {
		return nil
	}
	var found []string
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "TYPE", "PTTYPE", "UUID", "LABEL", "PTUUID":
			found = append(found, k+"="+v)
		}
	}
	return found
}

// CheckBlank refuses a device that holds a filesystem or a partition
// table: the error says what was found and how to go on.
func CheckBlank(dev, name string) error {
	f, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("--mkfs: check %s for an existing filesystem: %w", dev, err)
	}
	found := probeSignatures(f)
	f.Close()
	blk := blkidProbe(dev)
	if len(found) == 0 && len(blk) == 0 {
		return nil
	}
	what := strings.Join(found, ", ")
	if len(blk) > 0 {
		if what != "" {
			what += "; "
		}
		what += "blkid: " + strings.Join(blk, " ")
	}
	return fmt.Errorf("refusing --mkfs: %s (%s) already holds data (%s); mkfs would erase it. "+
		"Mount what is there without --mkfs, or add --force to erase it", name, dev, what)
}

// MakeFS makes a filesystem on dev.
func MakeFS(fstype, dev string) error {
	args := []string{dev}
	switch fstype {
	case "ext4", "ext3", "ext2":
		args = []string{"-F", "-q", dev}
	case "xfs":
		args = []string{"-f", "-q", dev}
	}
	_, err := RunTool("mkfs."+fstype, args...)
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

// Mount mounts dev on dir, nosuid and nodev unless opts says otherwise.
func Mount(fstype, dev, dir, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"-t", fstype, "-o", mountOptions(opts)}
	_, err := RunTool("mount", append(args, dev, dir)...)
	if err != nil && (strings.Contains(err.Error(), "wrong fs type") || strings.Contains(err.Error(), "bad superblock")) {
		return fmt.Errorf("%w\n(no %s filesystem on the namespace yet? add --mkfs to make one: it erases the namespace)", err, fstype)
	}
	return err
}

// Unmount unmounts dir.
func Unmount(dir string) error {
	_, err := RunTool("umount", dir)
	return err
}

// IsMounted reports whether dir is a mount point (/proc/self/mounts).
func IsMounted(dir string) bool {
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
