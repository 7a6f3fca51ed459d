package connd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// Disconnect bounds. The daemon's own teardown is bounded step by step
// (each tool toolTimeout, the FUSE unmount fusedev.UnmountRetry+2*fusedev.ServeEnd,
// the flush and close 30 s); the client waits disconnectAnswer for its
// answer and exitWait for it to exit. With --force a daemon still there is
// killed and what it leaves is cleaned here, so disconnect --force always
// finishes, within disconnectAnswer+exitWait+cleanup tools.
const (
	disconnectAnswer = 3 * time.Minute
	exitWait         = 30 * time.Second
)

// DisconnectResult is one controller's disconnect.
type DisconnectResult struct {
	Device string `json:"device"`
	SubNQN string `json:"subsysnqn,omitempty"`
	// OK: disconnected, nothing left behind.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Killed: the daemon did not finish and was killed (--force).
	Killed bool `json:"killed,omitempty"`
	// Cleaned lists what was taken down after the daemon was killed;
	// LeftBehind what is still there.
	Cleaned    []string `json:"cleaned,omitempty"`
	LeftBehind []string `json:"left_behind,omitempty"`
}

// Disconnect asks the daemon of controller dev (of store s) to tear down (unmount, detach,
// flush, close) and waits for it to exit, each step bounded. A daemon that
// is gone leaves a directory that is removed; with force, a daemon that
// does not finish is killed and its mounts, loop devices and FUSE mount
// are taken down here.
func Disconnect(s hoststate.Store, dev string, force bool) DisconnectResult {
	res := DisconnectResult{Device: dev}
	if _, err := os.Stat(s.InstanceDir(dev)); err != nil {
		res.Error = "no such controller"
		return res
	}
	st, _ := s.Read(dev)
	if st != nil {
		res.SubNQN = st.SubNQN
	}
	finish := func(err error) DisconnectResult {
		if err != nil {
			res.Error = err.Error()
		}
		if st != nil {
			res.LeftBehind = append(res.LeftBehind, leftovers(st.Namespaces)...)
		}
		res.OK = res.Error == "" && len(res.LeftBehind) == 0
		return res
	}
	r, err := Call(s, dev, Request{Op: "disconnect", Force: force}, disconnectAnswer, nil)
	switch {
	case err != nil && (st == nil || !hoststate.ProcessAlive(st.PID)):
		if st == nil {
			return finish(err)
		}
		// The daemon died: clean up after it.
		res.Cleaned = cleanupInstance(s, dev, st)
		return finish(nil)
	case err != nil:
		// Not answering: ask it by signal (it tears down on SIGTERM).
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
	case !r.OK && strings.HasPrefix(r.Error, "disconnected, but left behind"):
		// Torn down; what is left is reported below.
	case !r.OK:
		if !force {
			// Refused (a busy filesystem): the controller and its
			// devices are all still up, as the error says; they are
			// not "left behind".
			res.Error = r.Error
			return res
		}
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
	}
	if st == nil {
		return finish(nil)
	}
	if waitExit(st.PID, exitWait) {
		return finish(nil)
	}
	if !force {
		return finish(fmt.Errorf("daemon %d did not exit within %s (disconnect --force kills it and cleans up)", st.PID, exitWait))
	}
	_ = syscall.Kill(st.PID, syscall.SIGKILL)
	res.Killed = true
	waitExit(st.PID, 5*time.Second)
	res.Cleaned = cleanupInstance(s, dev, st)
	return finish(nil)
}

// waitExit waits up to d for pid to exit.
func waitExit(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); hoststate.ProcessAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// cleanupInstance takes down what a dead daemon left: its mounts (lazily),
// loop devices and FUSE mount, then its directory. It returns what it
// took down.
func cleanupInstance(s hoststate.Store, dev string, st *hoststate.Controller) []string {
	var done []string
	for _, n := range st.Namespaces {
		if n.Mount != "" && hostfs.IsMounted(n.Mount) && (n.Loop == "" || hostfs.MountSource(n.Mount) == n.Loop) {
			if _, err := hostfs.RunTool("umount", "-l", n.Mount); err == nil {
				done = append(done, "mount "+n.Mount)
			}
		}
		if n.Loop != "" && hostfs.LoopOn(n.Loop, n.File) {
			if err := hostfs.DetachLoop(n.Loop); err == nil {
				done = append(done, "loop device "+n.Loop)
			}
		}
	}
	fuseDir := filepath.Join(s.InstanceDir(dev), "dev")
	if hostfs.IsMounted(fuseDir) {
		if err := unix.Unmount(fuseDir, unix.MNT_DETACH); err == nil {
			done = append(done, "FUSE mount "+fuseDir)
		}
	}
	_ = s.Remove(dev)
	return done
}
