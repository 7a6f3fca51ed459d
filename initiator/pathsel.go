package initiator

import (
	"fmt"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// IOPolicy is how a multipath namespace spreads I/O over its paths (the
// nvme_core iopolicy parameter, /sys/class/nvme-subsystem/*/iopolicy).
// Every policy follows ANA: an optimized path is chosen before a
// non-optimized one, and a path in any other state never is.
type IOPolicy uint32

// I/O policies.
const (
	// IOPolicyNUMA keeps using one optimized path (the first found) while
	// it stays usable: Linux's default policy, the closest path by NUMA
	// distance, where every path is at the same distance here.
	IOPolicyNUMA IOPolicy = iota
	// IOPolicyRoundRobin sends each I/O on the next usable path in turn
	// (nvme_round_robin_path).
	IOPolicyRoundRobin
	// IOPolicyQueueDepth sends each I/O on the path with the fewest
	// commands in flight (nvme_queue_depth_path).
	IOPolicyQueueDepth
)

// String names the policy as sysfs does.
func (p IOPolicy) String() string {
	switch p {
	case IOPolicyNUMA:
		return "numa"
	case IOPolicyRoundRobin:
		return "round-robin"
	case IOPolicyQueueDepth:
		return "queue-depth"
	}
	return fmt.Sprintf("iopolicy(%d)", uint32(p))
}

// ParseIOPolicy parses a policy name: "numa", "round-robin" or
// "queue-depth".
func ParseIOPolicy(s string) (IOPolicy, error) {
	switch s {
	case "", "numa":
		return IOPolicyNUMA, nil
	case "round-robin":
		return IOPolicyRoundRobin, nil
	case "queue-depth":
		return IOPolicyQueueDepth, nil
	}
	return 0, fmt.Errorf("I/O policy %q: want numa, round-robin or queue-depth", s)
}

// pathView is what path selection knows of one path of a namespace.
type pathView struct {
	// usable: the controller is live, has the namespace, and its ANA
	// state is known (not waiting for the ANA log after an ANA error:
	// nvme_path_is_disabled).
	usable bool
	state  nvmeof.ANAState
	depth  int32 // commands in flight on the path
}

func (v pathView) optimized() bool    { return v.usable && v.state == nvmeof.ANAOptimized }
func (v pathView) nonOptimized() bool { return v.usable && v.state == nvmeof.ANANonOptimized }

// selectPath picks the path for the next I/O among paths under policy,
// cur being the path used last (-1: none). It returns -1 when no path is
// usable. It is pure.
func selectPath(policy IOPolicy, paths []pathView, cur int) int {
	if cur >= len(paths) {
		cur = -1
	}
	switch policy {
	case IOPolicyRoundRobin:
		if cur >= 0 {
			return roundRobinPath(paths, cur)
		}
	case IOPolicyQueueDepth:
		return queueDepthPath(paths)
	default:
		// nvme_find_path: the current path while it is optimized.
		if cur >= 0 && paths[cur].optimized() {
			return cur
		}
	}
	return findPath(paths)
}

// findPath is __nvme_find_path without NUMA distances: the first optimized
// path, else the first non-optimized one.
func findPath(paths []pathView) int {
	fallback := -1
	for i, v := range paths {
		if v.optimized() {
			return i
		}
		if fallback < 0 && v.nonOptimized() {
			fallback = i
		}
	}
	return fallback
}

// roundRobinPath is nvme_round_robin_path: the next optimized path after
// old; else the current one if it is optimized; else a non-optimized one
// after old (the last found, as Linux), or old itself if it is the only
// usable one.
func roundRobinPath(paths []pathView, old int) int {
	found := -1
	for k := 1; k < len(paths); k++ {
		i := (old + k) % len(paths)
		if paths[i].optimized() {
			return i
		}
		if paths[i].nonOptimized() {
			found = i
		}
	}
	if o := paths[old]; o.optimized() || (found < 0 && o.nonOptimized()) {
		return old
	}
	return found
}

// queueDepthPath is nvme_queue_depth_path: the optimized path with the
// fewest commands in flight, else the non-optimized one with the fewest.
func queueDepthPath(paths []pathView) int {
	bestOpt, bestNonOpt := -1, -1
	for i, v := range paths {
		switch {
		case v.optimized():
			if bestOpt < 0 || v.depth < paths[bestOpt].depth {
				bestOpt = i
			}
		case v.nonOptimized():
			if bestNonOpt < 0 || v.depth < paths[bestNonOpt].depth {
				bestNonOpt = i
			}
		}
	}
	if bestOpt >= 0 {
		return bestOpt
	}
	return bestNonOpt
}
