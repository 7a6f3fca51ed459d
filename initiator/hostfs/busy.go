package main

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

// fsUser is one process's use of a filesystem.
type fsUser struct {
	PID  int
	Comm string
	What string // "working directory /mnt/x", "open file /mnt/x/f", ...
}

func (u fsUser) String() string { return fmt.Sprintf("process %d (%s): %s", u.PID, u.Comm, u.What) }

// fsDevice returns the device number of the filesystem on loop (its
// rdev), else of the one mounted on dir; 0 if neither can be examined.
func fsDevice(loop, dir string) uint64 {
	var st unix.Stat_t
	if loop != "" && unix.Stat(loop, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return st.Rdev
	}
	if dir != "" && unix.Stat(dir, &st) == nil {
		return st.Dev
	}
	return 0
}

// fsUsers returns the processes (other than this one) that use the
// filesystem of device dev: by their working directory, root directory,
// program, open files and mapped files. At most max are returned, with
// the count of all.
func fsUsers(dev uint64, max int) ([]fsUser, int) {
	if dev == 0 {
		return nil, 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	var users []fsUser
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
			users = append(users, fsUser{PID: pid, Comm: strings.TrimSpace(string(comm)), What: what})
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

// busyReason describes what keeps the filesystem of loop mounted on dir
// busy, one item per line.
func busyReason(loop, dir string) []string {
	var why []string
	for _, m := range submounts(dir) {
		why = append(why, "a filesystem is mounted beneath it on "+m)
	}
	users, n := fsUsers(fsDevice(loop, dir), 10)
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

// busyUnmountError is the answer to a disconnect whose filesystem on dir
// cannot be unmounted: what keeps it busy, what was and was not
// disconnected, and the safe way on.
func busyUnmountError(dev string, n nsState, unmounted []string, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot unmount %s: it is busy (%v):\n", n.Mount, strings.TrimSpace(lastLine(err.Error())))
	for _, w := range busyReason(n.Loop, n.Mount) {
		fmt.Fprintf(&b, "  %s\n", w)
	}
	if len(unmounted) > 0 {
		fmt.Fprintf(&b, "Unmounted before: %s. ", strings.Join(unmounted, ", "))
	}
	on := ""
	if n.Loop != "" {
		on = fmt.Sprintf(" on %s", n.Loop)
	}
	fmt.Fprintf(&b, "Not disconnected: %s is still connected, %sn%d%s still mounted on %s; its data is safe.\n", dev, dev, n.NSID, on, n.Mount)
	fmt.Fprintf(&b, "Safe order: stop those processes or move them out of %s, then run the disconnect again (it unmounts %s", n.Mount, n.Mount)
	if n.Loop != "" {
		fmt.Fprintf(&b, ", detaches %s", n.Loop)
	}
	fmt.Fprintf(&b, " and disconnects %s).\n", dev)
	if n.Loop != "" {
		fmt.Fprintf(&b, "Never detach %s (losetup -d) while %s is mounted. ", n.Loop, n.Mount)
	}
	fmt.Fprintf(&b, "disconnect --force unmounts lazily (umount -l): the processes above keep the filesystem, and their reads and writes fail once %s is disconnected (what they have not written is lost)", dev)
	return fmt.Errorf("%s", b.String())
}

// lastLine is the last non-empty line of s (a tool's message).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
