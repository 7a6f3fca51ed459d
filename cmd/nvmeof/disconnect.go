package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// disconnectResult is one controller's disconnect.
type disconnectResult struct {
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

func runDisconnect(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("disconnect", stderr)
	nqn := fs.StringP("nqn", "n", "", "disconnect every controller of this subsystem NQN")
	device := fs.StringP("device", "d", "", "disconnect this controller (nvme0, or several: nvme0,nvme1)")
	force := fs.Bool("force", false, "always finish: unmount a busy filesystem lazily (the processes using it keep it, and their I/O fails); kill a daemon that does not finish and clean up after it")
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if (*nqn == "") == (*device == "") {
		fmt.Fprintf(stderr, "disconnect: need either -n NQN or -d DEVICE\n")
		return exitUsage
	}
	var devs []string
	if *device != "" {
		for _, d := range strings.Split(*device, ",") {
			devs = append(devs, strings.TrimPrefix(strings.TrimSpace(d), "/dev/"))
		}
	} else {
		for _, dev := range instances() {
			if st, err := readState(dev); err == nil && st.SubNQN == *nqn {
				devs = append(devs, dev)
			}
		}
	}
	return reportDisconnects(stdout, stderr, "disconnect", *output, *nqn, devs, *force)
}

func runDisconnectAll(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("disconnect-all", stderr)
	force := fs.Bool("force", false, "always finish: unmount a busy filesystem lazily (the processes using it keep it, and their I/O fails); kill a daemon that does not finish and clean up after it")
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	return reportDisconnects(stdout, stderr, "disconnect-all", *output, "", instances(), *force)
}

// reportDisconnects disconnects devs and prints the outcome: nvme-cli's
// "NQN:... disconnected N controller(s)" for -n, one line per controller
// otherwise, or JSON.
func reportDisconnects(stdout, stderr io.Writer, cmd, output, nqn string, devs []string, force bool) int {
	code := exitOK
	results := []disconnectResult{}
	n := 0
	for _, dev := range devs {
		r := disconnectDevice(dev, force)
		results = append(results, r)
		if !r.OK {
			code = exitFailure
		}
		if r.Error == "" {
			n++
		}
	}
	if output == "json" {
		b, _ := json.MarshalIndent(map[string]any{"disconnected": n, "controllers": results}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return code
	}
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(stderr, "%s: %s: %s\n", cmd, r.Device, r.Error)
		}
		if r.Killed {
			fmt.Fprintf(stderr, "%s: %s: the daemon did not finish; killed it\n", cmd, r.Device)
		}
		for _, c := range r.Cleaned {
			fmt.Fprintf(stderr, "%s: %s: cleaned up %s\n", cmd, r.Device, c)
		}
		for _, l := range r.LeftBehind {
			fmt.Fprintf(stderr, "%s: %s: left behind: %s\n", cmd, r.Device, l)
		}
		if nqn == "" && r.Error == "" {
			fmt.Fprintf(stdout, "%s: disconnected\n", r.Device)
		}
	}
	if nqn != "" {
		fmt.Fprintf(stdout, "NQN:%s disconnected %d controller(s)\n", nqn, n)
	}
	return code
}

// disconnectDevice asks dev's daemon to tear down (unmount, detach,
// flush, close) and waits for it to exit, each step bounded. A daemon that
// is gone leaves a directory that is removed; with force, a daemon that
// does not finish is killed and its mounts, loop devices and FUSE mount
// are taken down here.
func disconnectDevice(dev string, force bool) disconnectResult {
	res := disconnectResult{Device: dev}
	if _, err := os.Stat(instanceDir(dev)); err != nil {
		res.Error = "no such controller"
		return res
	}
	st, _ := readState(dev)
	if st != nil {
		res.SubNQN = st.SubNQN
	}
	finish := func(err error) disconnectResult {
		if err != nil {
			res.Error = err.Error()
		}
		if st != nil {
			res.LeftBehind = append(res.LeftBehind, leftovers(st.Namespaces)...)
		}
		res.OK = res.Error == "" && len(res.LeftBehind) == 0
		return res
	}
	r, err := ctlCall(dev, ctlRequest{Op: "disconnect", Force: force}, disconnectAnswer, nil)
	switch {
	case err != nil && (st == nil || !processAlive(st.PID)):
		if st == nil {
			return finish(err)
		}
		// The daemon died: clean up after it.
		res.Cleaned = cleanupInstance(dev, st)
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
	res.Cleaned = cleanupInstance(dev, st)
	return finish(nil)
}

// waitExit waits up to d for pid to exit.
func waitExit(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// cleanupInstance takes down what a dead daemon left: its mounts (lazily),
// loop devices and FUSE mount, then its directory. It returns what it
// took down.
func cleanupInstance(dev string, st *ctrlState) []string {
	var done []string
	for _, n := range st.Namespaces {
		if n.Mount != "" && isMounted(n.Mount) && (n.Loop == "" || mountSource(n.Mount) == n.Loop) {
			if _, err := runTool("umount", "-l", n.Mount); err == nil {
				done = append(done, "mount "+n.Mount)
			}
		}
		if n.Loop != "" && loopOn(n.Loop, n.File) {
			if err := detachLoop(n.Loop); err == nil {
				done = append(done, "loop device "+n.Loop)
			}
		}
	}
	fuseDir := filepath.Join(instanceDir(dev), "dev")
	if isMounted(fuseDir) {
		if err := unix.Unmount(fuseDir, unix.MNT_DETACH); err == nil {
			done = append(done, "FUSE mount "+fuseDir)
		}
	}
	_ = removeInstance(dev)
	return done
}
