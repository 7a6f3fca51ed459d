// Command nvmeof is nvmetd's NVMe over Fabrics host tool, in the shape of
// nvme-cli's fabrics commands, for the NVMe/RDMA transport over nvmetd's
// user-space iWARP engine (no RDMA hardware or kernel module needed) and
// for NVMe/TCP (-t tcp):
//
//	nvmeof discover     -t rdma|tcp -a ADDR [-s 4420] [-q HOSTNQN] [-I HOSTID] [-o normal|json]
//	nvmeof connect      -t rdma|tcp -a ADDR [-s 4420] -n NQN [-i N] [-Q N] [-k S] [-c S] [-l S]
//	                    [-g] [-G] [--crc off|offered|required] [--mount DIR [--fstype ext4] [--mkfs]]
//	nvmeof connect-all  -t rdma|tcp -a ADDR [-s 4420] [connect flags]
//	nvmeof disconnect   -n NQN | -d DEVICE
//	nvmeof disconnect-all
//	nvmeof list         [-o normal|json]
//	nvmeof gen-hostnqn
//	nvmeof gen-dhchap-key [-s HEX] [-l 32|48|64] [-m 0..3] [-n HOSTNQN]
//	nvmeof bench        (-d DEVICE | -t rdma|tcp -a ADDR -s PORT -n NQN) [--rw randread] [--bs 4k] [--iodepth 32] ...
//
// The connection lives in a process of ours, not in the kernel: connect
// starts a small daemon per controller (this program, re-executed as
// "nvmeof serve", in its own session, logging under the runtime
// directory) that keeps the association (keep alive, reconnection) and
// exposes each namespace as a block-device file through FUSE
// (RUNDIR/nvme0/dev/n1). With --mount it attaches the file to a loop device
// and mounts its filesystem. list shows the controllers, namespaces, device
// files, loop devices and mounts; disconnect unmounts, detaches, flushes and
// closes in that order.
//
// The runtime directory is /run/nvmeof for root, else
// $XDG_RUNTIME_DIR/nvmeof (--state-dir or NVMEOF_STATE_DIR override it).
// The host NQN and host ID are nvme-cli's (/etc/nvme/hostnqn,
// /etc/nvme/hostid, else derived from the machine; see gen-hostnqn).
//
// Exit status: 0 on success, 1 on failure, 2 on a usage error.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/internal/version"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// command is one subcommand.
type command struct {
	name   string
	usage  string
	hidden bool
	run    func(args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{name: "discover", usage: "Discover NVMe-oF subsystems", run: runDiscover},
		{name: "connect", usage: "Connect to an NVMe-oF subsystem", run: runConnect},
		{name: "connect-all", usage: "Discover and connect to every NVMe-oF subsystem", run: runConnectAll},
		{name: "disconnect", usage: "Disconnect from an NVMe-oF subsystem", run: runDisconnect},
		{name: "disconnect-all", usage: "Disconnect from every NVMe-oF subsystem", run: runDisconnectAll},
		{name: "list", usage: "List connected controllers, namespaces, devices and mounts", run: runList},
		{name: "gen-hostnqn", usage: "Generate an NVMe host NQN", run: runGenHostNQN},
		{name: "show-hostnqn", usage: "Show the host NQN and host ID in use", run: runShowHostNQN},
		{name: "gen-dhchap-key", usage: "Generate a DH-HMAC-CHAP host key (as nvme gen-dhchap-key)", run: runGenDHCHAPKey},
		{name: "bench", usage: "Load generator against a namespace (IOPS, bandwidth, latency)", run: runBench},
		{name: "serve", hidden: true, run: runServe},
	}
	commands = append(commands, adminCommands...) // admin.go: nvme-cli's admin commands, autoconnect
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintln(stdout, version.Line("nvmeof"))
		return exitOK
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "nvmeof: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: nvmeof <command> [<args>]\n\nThe following are all implemented sub-commands:\n")
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-16s %s\n", c.name, c.usage)
		}
	}
	fmt.Fprintf(w, "\nSee 'nvmeof <command> --help' for more information on a command; 'nvmeof --version' for the version.\n")
}

// newFlagSet makes a flag set for a subcommand that reports errors to
// stderr.
func newFlagSet(name string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nvmeof "+name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	return fs
}

// parse parses args; it returns an exit code and false when the command
// must stop (help or a usage error).
func parse(fs *pflag.FlagSet, args []string, stderr io.Writer) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments: %s\n", fs.Name(), strings.Join(fs.Args(), " "))
		return exitUsage, false
	}
	return exitOK, true
}

// fail prints an error the way the other commands do and returns
// exitFailure.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	return exitFailure
}
