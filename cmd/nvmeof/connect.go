package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/connd"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// addConnectFlags defines connect's flags (nvme-cli's and ours) on fs.
func addConnectFlags(fs *pflag.FlagSet, o *connd.Options, output *string) {
	addFabricsFlags(fs, &o.Fabrics, true)
	fs.StringVar(&o.Mount, "mount", "", "mount the namespace's filesystem on this directory (FUSE file, loop device, mount)")
	fs.BoolVar(&o.Loop, "loop", false, "attach the namespace's file to a loop device (implied by --mount)")
	fs.Uint32Var(&o.MountNSID, "mount-nsid", 0, "namespace for --mount and --loop (default: the first)")
	fs.StringVar(&o.FSType, "fstype", "ext4", "filesystem type for --mount (ext4, xfs, ...)")
	fs.BoolVar(&o.MKFS, "mkfs", false, "make the filesystem first (mkfs.FSTYPE), only on a namespace that holds no filesystem or partition table")
	fs.BoolVar(&o.Force, "force", false, "with --mkfs: make the filesystem even over an existing one or a partition table (erases the namespace)")
	fs.StringVar(&o.MountOpts, "mount-options", "", "mount -o options, after the default nosuid,nodev (give suid or dev to allow them)")
	fs.BoolVar(&o.LoopDirectIO, "loop-direct-io", true, "the loop device does direct I/O on the FUSE file (losetup --direct-io)")
	fs.BoolVar(&o.FUSEDirectIO, "fuse-direct-io", true, "the FUSE device files bypass the page cache (FOPEN_DIRECT_IO)")
	fs.StringVarP(output, "output-format", "o", "normal", "output format: normal or json")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "serve the controller's Prometheus metrics on IP:port or unix:/path (per I/O queue: commands, bytes, in flight, latency)")
	fs.StringVar(&o.IOPolicy, "iopolicy", "", "multipath I/O policy of the subsystem: numa (first optimized path), round-robin or queue-depth (default numa; given with a path to a connected subsystem, it changes the policy)")
	fs.IntVarP(&o.FastIOFailTmo, "fast-io-fail-tmo", "f", -1, "seconds a lost path may hold I/O before it fails when no other path is usable (-1: until ctrl-loss-tmo)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory (default /run/nvmeof or $XDG_RUNTIME_DIR/nvmeof)")
}

func runConnect(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("connect", stderr)
	var o connd.Options
	var output string
	addConnectFlags(fs, &o, &output)
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if o.Fabrics.NQN == "" {
		fmt.Fprintf(stderr, "connect: need a subsystem NQN (-n)\n")
		return exitUsage
	}
	if err := nvmeof.ValidateNQN(o.Fabrics.NQN); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	if _, err := o.Fabrics.Config(o.Fabrics.NQN, nil); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	if _, err := initiator.ParseIOPolicy(o.IOPolicy); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	addr, _ := o.Fabrics.Address()
	if dev := store().ConnectedTo(o.Fabrics.NQN, addr); dev != "" {
		fmt.Fprintf(stderr, "connect: already connected to %s at %s (%s)\n", o.Fabrics.NQN, addr, dev)
		return exitFailure
	}
	if dev := store().SubsystemDevice(o.Fabrics.NQN); dev != "" {
		// Another port of a connected subsystem: one more path of the
		// same device (nvme-cli: a new controller of the subsystem,
		// its namespaces joining the existing multipath disks).
		if o.Mount != "" || o.Loop {
			fmt.Fprintf(stderr, "connect: %s is connected as %s: this connect adds a path to it, and its namespaces are attached (--mount, --loop) once, by the first connect\n", o.Fabrics.NQN, dev)
			return exitUsage
		}
		r, err := connd.Call(store(), dev, connd.Request{Op: "add-path", Path: &o}, o.Fabrics.ConnectTimeout+time.Minute, nil)
		if err == nil && !r.OK {
			err = errors.New(r.Error)
		}
		if err != nil {
			return fail(stderr, "could not add path to "+dev, err)
		}
		if output == "json" {
			b, _ := json.MarshalIndent(map[string]any{"device": dev, "path": addr, "state": r.State}, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprintf(stdout, "added path %s to %s (%s, %d paths)\n", addr, dev, o.Fabrics.NQN, len(r.State.Paths))
		}
		return exitOK
	}
	st, err := connd.Start(store(), &o)
	if err != nil {
		return fail(stderr, "could not add new controller", err)
	}
	printConnected(stdout, st, output)
	return exitOK
}

// printConnected reports a new controller: its device name, like
// nvme-cli's "connecting to device: nvme0", with the local files.
func printConnected(w io.Writer, st *hoststate.Controller, format string) {
	if format == "json" {
		b, _ := json.MarshalIndent(map[string]any{"device": st.Device, "state": st}, "", "  ")
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "connecting to device: %s\n", st.Device)
	for _, ns := range st.Namespaces {
		line := fmt.Sprintf("  %sn%d: %s", st.Device, ns.NSID, ns.File)
		if ns.Loop != "" {
			line += " -> " + ns.Loop
		}
		if ns.Mount != "" {
			line += " mounted on " + ns.Mount + " (" + ns.FSType + ")"
		}
		fmt.Fprintln(w, line)
	}
}
