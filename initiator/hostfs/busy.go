package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// What keeps a namespace's filesystem busy, for a disconnect that cannot
// unmount it (issue 23.5): the processes whose working directory, root,
// program or open files are on it, found by device number, so that a
// filesystem already detached from the tree (umount -l) is found too, and
// the mounts beneath its mount point.

// User is one process's use of a filesystem.
type User struct {
	PID  int
	Comm string
	What string // "working directory /mnt/x", "open file /mnt/x/f", ...
}

func (u User) String() string { return fmt.Sprintf("process %d (%s): %s", u.PID, u.Comm, u.What) }

// FSDevice returns the device number of the filesystem on loop (its
// rdev), else of the one mounted on dir; 0 if neither can be examined.
func FSDevice(loop, dir string) uint64 {
	var st unix.Stat_t
	if loop != "" && unix.Stat(loop, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return st.Rdev
	}
	if dir != "" && unix.Stat(dir, &st) == nil {
		return st.Dev
	}
	return 0
}

// Users returns the processes (other than this one) that use the
// filesystem of device dev: by their working directory, root directory,
// program, open files and mapped files. At most max are returned, with
// the count of all.
func Users(dev uint64, max int) ([]User, int) {
	if dev == 0 {
		return nil, 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	var users []User
	n := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		what := procUse(p, dev)
		if what == "" {
			continue
		}
		n++
		if len(users) < max {
			comm, _ := os.ReadFile(filepath.Join(p, "comm"))
			users = append(users, User{PID: pid, Comm: strings.TrimSpace(string(comm)), What: what})
		}
	}
	sort.Slice(users, func(i, j int) bool { return users[i].PID < users[j].PID })
	return users, n
}

// procUse says how the process at /proc/PID uses device dev's filesystem,
// or "".
func procUse(p string, dev uint64) string {
	on := func(link string) (string, bool) {
		var st unix.Stat_t
		if unix.Stat(link, &st) != nil || st.Dev != dev {
			return "", false
		}
		target, _ := os.Readlink(link)
		return target, true
	}
	for _, l := range []struct{ name, what string }{{"cwd", "working directory"}, {"root", "root directory"}, {"exe", "program"}} {
		if t, ok := on(filepath.Join(p, l.name)); ok {
			return l.what + " " + t
		}
	}
	fds, _ := os.ReadDir(filepath.Join(p, "fd"))
	for _, fd := range fds {
		if t, ok := on(filepath.Join(p, "fd", fd.Name())); ok {
			return "open file " + t
		}
	}
	maps, _ := os.ReadFile(filepath.Join(p, "maps"))
	major, minor := unix.Major(dev), unix.Minor(dev)
	want := fmt.Sprintf(" %02x:%02x ", major, minor)
	for _, l := range strings.Split(string(maps), "\n") {
		// address perms offset dev inode path
		if strings.Contains(l, want) {
			f := strings.Fields(l)
			return "mapped file " + f[len(f)-1]
		}
	}
	return ""
}

// submounts returns the mount points beneath dir.
func submounts(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1])
		}
	}
	return out
}

// BusyReason describes what keeps the filesystem of loop mounted on dir
// busy, one item per line.
func BusyReason(loop, dir string) []string {
	var why []string
	for _, m := range submounts(dir) {
		why = append(why, "a filesystem is mounted beneath it on "+m)
	}
	users, n := Users(FSDevice(loop, dir), 10)
	for _, u := range users {
		why = append(why, u.String())
	}
	if n > len(users) {
		why = append(why, fmt.Sprintf("and %d more processes", n-len(users)))
	}
	if len(why) == 0 {
		why = append(why, "no process of this host's view holds it: another mount namespace (a container, a service with PrivateMounts), an NFS export or a swap file may (fuser -vm "+dir+")")
	}
	return why
}

// BlockDeviceBusy reports whether something holds dev exclusively (a
// mounted filesystem, also one unmounted lazily and still in use; a
// device-mapper or md device): open(2) with O_EXCL fails with EBUSY.
func BlockDeviceBusy(dev string) bool {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return err == unix.EBUSY
	}
	unix.Close(fd)
	return false
}

// MountSource returns the device mounted on dir, or "".
func MountSource(dir string) string {
	b, _ := os.ReadFile("/proc/self/mounts")
	src := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == dir {
			src = f[0] // the last one is on top
		}
	}
	return src
}

// LoopOn reports whether loop device dev is attached to the namespace file
// file. Once the FUSE directory is unmounted lazily (a loop device under a
// filesystem still in use keeps it), the kernel names the file from the
// detached mount's root: "/n1".
func LoopOn(dev, file string) bool {
	b := LoopBacking(dev)
	return b != "" && (b == file || (b == "/"+filepath.Base(file) && !IsMounted(filepath.Dir(file))))
}

// LoopBacking returns the file a loop device is attached to, or "".
func LoopBacking(dev string) string {
	b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/loop/backing_file")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// MountOf returns where dev (a loop device) is mounted, or "".
func MountOf(dev string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == dev {
			return f[1]
		}
	}
	return ""
}
