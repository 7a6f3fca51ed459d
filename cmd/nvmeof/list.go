package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nvmetd/nvmetd/initiator/bench"
)

func runList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list", stderr)
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json (nvme list's \"Devices\", and \"controllers\")")
	verbose := fs.BoolP("verbose", "v", false, "with -o json: \"Devices\" in nvme list -v's form (hosts, subsystems, namespaces, paths)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	var all []*ctrlState
	for _, dev := range instances() {
		st := liveState(dev)
		if st != nil {
			all = append(all, st)
		}
	}
	if *output == "json" {
		if all == nil {
			all = []*ctrlState{}
		}
		var devices any = nvmeListItems(all)
		if *verbose {
			devices = nvmeListDetail(all)
		}
		b, _ := json.MarshalIndent(map[string]any{"Devices": devices, "controllers": all}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if len(all) == 0 {
		fmt.Fprintln(stdout, "No NVMe-oF controllers connected")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Device\tState\tCntlid\tAddress\tSubsystem NQN\tQueues\tReconnects\tPID")
	fmt.Fprintln(tw, "------\t-----\t------\t-------\t-------------\t------\t----------\t---")
	for _, st := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d\trdma %s\t%s\t%dx%d\t%d\t%d\n", st.Device, st.State, st.CNTLID, st.Address, st.SubNQN,
			st.IOQueues, st.QueueSize, st.Reconnects, st.PID)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Namespace\tNSID\tSize\tLBA\tDevice file\tLoop\tMount")
	fmt.Fprintln(tw, "---------\t----\t----\t---\t-----------\t----\t-----")
	for _, st := range all {
		for _, n := range st.Namespaces {
			mnt := n.Mount
			if mnt != "" {
				mnt += " (" + n.FSType + ")"
			}
			fmt.Fprintf(tw, "%sn%d\t%d\t%s\t%d B\t%s\t%s\t%s\n", st.Device, n.NSID, n.NSID, bench.HumanSize(n.Size), n.BlockSize,
				n.File, dash(n.Loop), dash(mnt))
		}
	}
	tw.Flush()
	printPaths(stdout, all)
	return exitOK
}

// printPaths shows each subsystem with its paths and their ANA states,
// as nvme list-subsys does.
func printPaths(w io.Writer, all []*ctrlState) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Subsystem	I/O policy	Path	Cntlid	State	ANA")
	fmt.Fprintln(tw, "---------	----------	----	------	-----	---")
	for _, st := range all {
		pol := dash(st.IOPolicy)
		paths := st.Paths
		if len(paths) == 0 { // a state from before multipath
			paths = []pathState{{Address: st.Address, CNTLID: st.CNTLID, State: st.State}}
		}
		for i, p := range paths {
			var ana []string
			for _, a := range p.ANA {
				ana = append(ana, fmt.Sprintf("n%d %s", a.NSID, a.State))
			}
			name := st.Device + " " + st.SubNQN
			if i > 0 {
				name, pol = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\trdma %s\t%d\t%s\t%s\n", name, pol, p.Address, p.CNTLID, p.State, dash(strings.Join(ana, ", ")))
		}
	}
	tw.Flush()
}

// liveState asks the daemon; if it does not answer, the state file says
// what was last known and the state becomes "unreachable".
func liveState(dev string) *ctrlState {
	if r, err := ctlCall(dev, ctlRequest{Op: "status"}, 5*time.Second, nil); err == nil && r.State != nil {
		return r.State
	}
	st, err := readState(dev)
	if err != nil {
		return nil
	}
	if processAlive(st.PID) {
		st.State = "unreachable"
	} else {
		st.State = "dead"
	}
	return st
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
