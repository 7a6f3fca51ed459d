package nvmecli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// WriteList is nvmeof list's normal output: the controllers, their
// namespaces (device file, loop device, mount) and the subsystems' paths
// with their ANA states.
func WriteList(w io.Writer, all []*hoststate.Controller) {
	if len(all) == 0 {
		fmt.Fprintln(w, "No NVMe-oF controllers connected")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Device\tState\tCntlid\tAddress\tSubsystem NQN\tQueues\tReconnects\tPID")
	fmt.Fprintln(tw, "------\t-----\t------\t-------\t-------------\t------\t----------\t---")
	for _, st := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d\trdma %s\t%s\t%dx%d\t%d\t%d\n", st.Device, st.State, st.CNTLID, st.Address, st.SubNQN,
			st.IOQueues, st.QueueSize, st.Reconnects, st.PID)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
	printPaths(w, all)
}

// WriteListJSON is nvmeof list -o json: nvme-cli's "Devices" (nvme list
// -o json, or with verbose nvme list -v -o json) and our "controllers".
func WriteListJSON(w io.Writer, all []*hoststate.Controller, verbose bool) {
	if all == nil {
		all = []*hoststate.Controller{}
	}
	var devices any = nvmeListItems(all)
	if verbose {
		devices = nvmeListDetail(all)
	}
	b, _ := json.MarshalIndent(map[string]any{"Devices": devices, "controllers": all}, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

// printPaths shows each subsystem with its paths and their ANA states,
// as nvme list-subsys does.
func printPaths(w io.Writer, all []*hoststate.Controller) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Subsystem	I/O policy	Path	Cntlid	State	ANA")
	fmt.Fprintln(tw, "---------	----------	----	------	-----	---")
	for _, st := range all {
		pol := dash(st.IOPolicy)
		paths := st.Paths
		if len(paths) == 0 { // a state from before multipath
			paths = []hoststate.Path{{Address: st.Address, CNTLID: st.CNTLID, State: st.State}}
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

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
