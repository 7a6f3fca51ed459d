package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

func runDisconnect(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("disconnect", stderr)
	nqn := fs.StringP("nqn", "n", "", "disconnect every controller of this subsystem NQN")
	device := fs.StringP("device", "d", "", "disconnect this controller (nvme0, or several: nvme0,nvme1)")
	force := fs.Bool("force", false, "go on when the filesystem is busy (lazy unmount)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if (*nqn == "") == (*device == "") {
		fmt.Fprintf(stderr, "disconnect: need either -n NQN or -d DEVICE\n")
		return exitUsage
	}
	if *device != "" {
		code := exitOK
		for _, d := range strings.Split(*device, ",") {
			d = strings.TrimPrefix(strings.TrimSpace(d), "/dev/")
			if err := disconnectDevice(d, *force); err != nil {
				fmt.Fprintf(stderr, "disconnect: %v\n", err)
				code = exitFailure
			}
		}
		return code
	}
	n, code := 0, exitOK
	for _, dev := range instances() {
		st, err := readState(dev)
		if err != nil || st.SubNQN != *nqn {
			continue
		}
		if err := disconnectDevice(dev, *force); err != nil {
			fmt.Fprintf(stderr, "disconnect: %v\n", err)
			code = exitFailure
			continue
		}
		n++
	}
	fmt.Fprintf(stdout, "NQN:%s disconnected %d controller(s)\n", *nqn, n)
	return code
}

func runDisconnectAll(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("disconnect-all", stderr)
	force := fs.Bool("force", false, "go on when a filesystem is busy (lazy unmount)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	code := exitOK
	for _, dev := range instances() {
		if err := disconnectDevice(dev, *force); err != nil {
			fmt.Fprintf(stderr, "disconnect-all: %v\n", err)
			code = exitFailure
		}
	}
	return code
}

// disconnectDevice asks dev's daemon to tear down (unmount, detach,
// flush, close) and waits for it to exit. A daemon that is gone leaves a
// directory that is removed.
func disconnectDevice(dev string, force bool) error {
	if _, err := os.Stat(instanceDir(dev)); err != nil {
		return fmt.Errorf("%s: no such controller", dev)
	}
	st, _ := readState(dev)
	r, err := ctlCall(dev, ctlRequest{Op: "disconnect", Force: force}, 2*time.Minute, nil)
	if err != nil {
		if st != nil && !processAlive(st.PID) {
			return removeInstance(dev) // the daemon died: clean up after it
		}
		if st != nil && processAlive(st.PID) {
			// Not answering: ask it by signal (it tears down on SIGTERM).
			_ = syscall.Kill(st.PID, syscall.SIGTERM)
			return waitExit(dev, st.PID)
		}
		return err
	}
	if !r.OK {
		return fmt.Errorf("%s: %s", dev, r.Error)
	}
	if st != nil {
		return waitExit(dev, st.PID)
	}
	return nil
}

func waitExit(dev string, pid int) error {
	for deadline := time.Now().Add(time.Minute); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: daemon %d did not exit", dev, pid)
		}
	}
	return nil
}
