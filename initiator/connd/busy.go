package connd

import (
	"fmt"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// busyUnmountError is the answer to a disconnect whose filesystem on dir
// cannot be unmounted: what keeps it busy, what was and was not
// disconnected, and the safe way on.
func busyUnmountError(dev string, n hoststate.Namespace, unmounted []string, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot unmount %s: it is busy (%v):\n", n.Mount, strings.TrimSpace(lastLine(err.Error())))
	for _, w := range hostfs.BusyReason(n.Loop, n.Mount) {
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
