package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/connd"
)

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
		for _, dev := range store().Instances() {
			if st, err := store().Read(dev); err == nil && st.SubNQN == *nqn {
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
	return reportDisconnects(stdout, stderr, "disconnect-all", *output, "", store().Instances(), *force)
}

// reportDisconnects disconnects devs and prints the outcome: nvme-cli's
// "NQN:... disconnected N controller(s)" for -n, one line per controller
// otherwise, or JSON.
func reportDisconnects(stdout, stderr io.Writer, cmd, output, nqn string, devs []string, force bool) int {
	code := exitOK
	results := []connd.DisconnectResult{}
	n := 0
	for _, dev := range devs {
		r := connd.Disconnect(store(), dev, force)
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
