package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/initiator/connd"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/initiator/nvmecli"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// adminCommands are nvme-cli's query commands on a connected controller
// (the daemon of nvmeof connect runs each admin command; see
// initiator/connd/admin.go), and the fabrics autoconnect commands.
var adminCommands = []command{
	{name: "id-ctrl", usage: "Send NVMe Identify Controller", run: runIDCtrl},
	{name: "id-ns", usage: "Send NVMe Identify Namespace, display structure", run: runIDNS},
	{name: "list-subsys", usage: "List nvme subsystems", run: runListSubsys},
	{name: "smart-log", usage: "Retrieve SMART Log, show it", run: runSMARTLog},
	{name: "error-log", usage: "Retrieve Error Log, show it", run: runErrorLog},
	{name: "fw-log", usage: "Retrieve FW Log, show it", run: runFWLog},
	{name: "effects-log", usage: "Retrieve Command Effects Log, show it", run: runEffectsLog},
	{name: "ana-log", usage: "Retrieve ANA Log, show it", run: runANALog},
	{name: "get-feature", usage: "Get feature and show the resulting value", run: runGetFeature},
	{name: "get-log", usage: "Generic NVMe get log, returns log in raw format", run: runGetLog},
	{name: "autoconnect", usage: "Connect what /etc/nvme/discovery.conf and /etc/nvme/config.json name", run: runAutoconnect},
}

// adminOpts are the flags every admin command has.
type adminOpts struct {
	device string
	output string
	binary bool
	human  bool
	nsid   uint32 // from the device name nvme0n1, else 0
}

func (o *adminOpts) addFlags(fs *pflag.FlagSet, human, binary bool) {
	fs.StringVarP(&o.device, "device", "d", "", "controller: nvme0 (or /dev/nvme0, nvme0n1), as list shows")
	fs.StringVarP(&o.output, "output-format", "o", "normal", "Output format: normal|json|binary")
	if binary {
		fs.BoolVarP(&o.binary, "raw-binary", "b", false, "show log or data in binary format")
	}
	if human {
		fs.BoolVarP(&o.human, "human-readable", "H", false, "show fields in human readable format")
	}
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory (default /run/nvmeof)")
}

var nsDevRE = regexp.MustCompile(`^(nvme[0-9]+)n([0-9]+)$`)

// parseAdmin parses args (flags and at most one device argument, as
// nvme-cli takes /dev/nvme0).
func (o *adminOpts) parse(fs *pflag.FlagSet, args []string, stderr io.Writer) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return exitOK, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitUsage, false
	}
	switch {
	case fs.NArg() == 1 && o.device == "":
		o.device = fs.Arg(0)
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments: %s\n", fs.Name(), strings.Join(fs.Args(), " "))
		return exitUsage, false
	}
	if o.device == "" {
		fmt.Fprintf(stderr, "%s: no device: give -d nvme0 (nvmeof list shows the controllers)\n", fs.Name())
		return exitUsage, false
	}
	o.device = strings.TrimPrefix(o.device, "/dev/")
	if m := nsDevRE.FindStringSubmatch(o.device); m != nil {
		o.device = m[1]
		n, _ := strconv.ParseUint(m[2], 10, 32)
		o.nsid = uint32(n)
	}
	switch o.output {
	case "normal", "json", "binary":
	default:
		fmt.Fprintf(stderr, "%s: invalid output format %q (normal|json|binary)\n", fs.Name(), o.output)
		return exitUsage, false
	}
	if o.binary {
		o.output = "binary"
	}
	return exitOK, true
}

// adminFail prints err as nvme-cli does and returns the exit status.
func adminFail(stderr io.Writer, cmd string, err error) int {
	if se, ok := err.(*connd.StatusError); ok {
		fmt.Fprintln(stderr, se.Error())
		return exitFailure
	}
	return fail(stderr, cmd, err)
}

func runIDCtrl(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("id-ctrl", stderr)
	var o adminOpts
	o.addFlags(fs, true, true)
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	b, err := connd.Identify(store(), o.device, 1, 0)
	if err != nil {
		return adminFail(stderr, "identify controller", err)
	}
	c, err := nvmeof.ParseIdentifyController(b)
	if err != nil {
		return fail(stderr, "id-ctrl", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(c[:])
	case "json":
		fmt.Fprintln(stdout, nvmecli.IDCtrlJSON(c).String())
	default:
		nvmecli.PrintIDCtrl(stdout, c, o.human)
	}
	return exitOK
}

func runIDNS(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("id-ns", stderr)
	var o adminOpts
	var nsid uint32
	o.addFlags(fs, true, true)
	fs.Uint32VarP(&nsid, "namespace-id", "n", 0, "identifier of desired namespace")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	if nsid == 0 {
		nsid = o.nsid
	}
	if nsid == 0 {
		fmt.Fprintln(stderr, "id-ns: no namespace: give -n NSID (or the device nvme0n1)")
		return exitUsage
	}
	b, err := connd.Identify(store(), o.device, 0, nsid)
	if err != nil {
		return adminFail(stderr, "identify namespace", err)
	}
	n, err := nvmeof.ParseIdentifyNamespace(b)
	if err != nil {
		return fail(stderr, "id-ns", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(n[:])
	case "json":
		fmt.Fprintln(stdout, nvmecli.IDNSJSON(n).String())
	default:
		nvmecli.PrintIDNS(stdout, n, nsid, o.human)
	}
	return exitOK
}

func runSMARTLog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("smart-log", stderr)
	var o adminOpts
	var nsid uint32
	o.addFlags(fs, true, true)
	fs.Uint32VarP(&nsid, "namespace-id", "n", 0xffffffff, "identifier of desired namespace")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	b, err := connd.GetLog(store(), o.device, nvmeof.LIDSMART, nsid, 0, 0, nvmeof.SMARTLogSize)
	if err != nil {
		return adminFail(stderr, "smart log", err)
	}
	l, err := nvmeof.ParseSMARTLog(b)
	if err != nil {
		return fail(stderr, "smart-log", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(l[:])
	case "json":
		fmt.Fprintln(stdout, nvmecli.SMARTJSON(l, o.human).String())
	default:
		nvmecli.PrintSMART(stdout, l, o.device, nsid, o.human)
	}
	return exitOK
}

func runErrorLog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("error-log", stderr)
	var o adminOpts
	var entries uint32
	o.addFlags(fs, false, true)
	fs.Uint32VarP(&entries, "log-entries", "e", 64, "number of entries to retrieve")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	if entries == 0 {
		fmt.Fprintln(stderr, "non-zero log-entries is required param")
		return exitUsage
	}
	cb, err := connd.Identify(store(), o.device, 1, 0)
	if err != nil {
		return adminFail(stderr, "identify controller", err)
	}
	c, _ := nvmeof.ParseIdentifyController(cb)
	b, err := connd.GetLog(store(), o.device, nvmeof.LIDErrorInfo, 0xffffffff, 0, 0, connd.ErrorLogLength(c, entries))
	if err != nil {
		return adminFail(stderr, "error log", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(b)
	case "json":
		fmt.Fprintln(stdout, nvmecli.ErrorLogJSON(b).String())
	default:
		nvmecli.PrintErrorLog(stdout, b, o.device)
	}
	return exitOK
}

func runFWLog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fw-log", stderr)
	var o adminOpts
	o.addFlags(fs, false, true)
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	b, err := connd.GetLog(store(), o.device, nvmeof.LIDFirmwareSlot, 0xffffffff, 0, 0, nvmeof.FirmwareSlotLogSize)
	if err != nil {
		return adminFail(stderr, "fw log", err)
	}
	l, err := nvmeof.ParseFirmwareSlotLog(b)
	if err != nil {
		return fail(stderr, "fw-log", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(l[:])
	case "json":
		fmt.Fprintln(stdout, nvmecli.FWLogJSON(l, o.device).String())
	default:
		nvmecli.PrintFWLog(stdout, l, o.device)
	}
	return exitOK
}

func runEffectsLog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("effects-log", stderr)
	var o adminOpts
	var csi int
	o.addFlags(fs, true, true)
	fs.IntVarP(&csi, "csi", "c", -1, "command set identifier (default: NVM)")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	if csi < 0 {
		// nvme-cli reads CAP.CSS from the PCI BAR to pick the command
		// sets; a fabrics controller has none (nvme-cli 2.3 then prints
		// nothing): NVM, the command set of every nvmetd namespace.
		csi = 0
	}
	if csi > 0xff {
		fmt.Fprintf(stderr, "invalid csi %d\n", csi)
		return exitUsage
	}
	b, err := connd.GetLogCSI(store(), o.device, nvmeof.LIDCommandEffects, 0xffffffff, 0, 0, nvmeof.CommandEffectsLogSize, uint8(csi))
	if err != nil {
		return adminFail(stderr, "effects log", err)
	}
	l, err := nvmeof.ParseCommandEffectsLog(b)
	if err != nil {
		return fail(stderr, "effects-log", err)
	}
	switch o.output {
	case "binary":
		_, _ = stdout.Write(l[:])
	case "json":
		fmt.Fprintln(stdout, nvmecli.EffectsJSON(l, uint8(csi)))
	default:
		nvmecli.PrintEffects(stdout, l, uint8(csi), o.human)
	}
	return exitOK
}

func runANALog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ana-log", stderr)
	var o adminOpts
	var groups bool
	o.addFlags(fs, false, false)
	fs.BoolVarP(&groups, "groups", "g", false, "Return ANA groups only")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	cb, err := connd.Identify(store(), o.device, 1, 0)
	if err != nil {
		return adminFail(stderr, "identify controller", err)
	}
	c, _ := nvmeof.ParseIdentifyController(cb)
	n, lsp := connd.ANALogLength(c, groups)
	b, err := connd.GetLog(store(), o.device, nvmeof.LIDANA, 0xffffffff, lsp, 0, n)
	if err != nil {
		return adminFail(stderr, "ana-log", err)
	}
	if o.output == "binary" {
		_, _ = stdout.Write(b)
		return exitOK
	}
	l, err := nvmeof.ParseANALog(b)
	if err != nil {
		return fail(stderr, "ana-log", err)
	}
	if o.output == "json" {
		fmt.Fprintln(stdout, nvmecli.ANAJSON(l, o.device).String())
	} else {
		nvmecli.PrintANA(stdout, l, o.device)
	}
	return exitOK
}

func runGetFeature(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("get-feature", stderr)
	var o adminOpts
	var nsid, cdw11, dataLen uint32
	var fid, sel, uuid uint8
	o.addFlags(fs, true, true)
	fs.Uint32VarP(&nsid, "namespace-id", "n", 0, "identifier of desired namespace")
	fs.Uint8VarP(&fid, "feature-id", "f", 0, "feature identifier (0: all features)")
	fs.Uint8VarP(&sel, "sel", "s", 0, "[0-3]: current/default/saved/supported")
	fs.Uint32VarP(&dataLen, "data-len", "l", 0, "buffer len if data is returned through host memory buffer")
	fs.Uint32VarP(&cdw11, "cdw11", "c", 0, "dword 11 for interrupt vector config")
	fs.Uint8VarP(&uuid, "uuid-index", "U", 0, "UUID Index of the feature")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	if sel > 3 {
		fmt.Fprintf(stderr, "invalid 'select' param:%d\n", sel)
		return exitUsage
	}
	// -o json: one object for the command, as nvme-cli 2.x prints it
	// (json_show_init ... json_show_finish around every command).
	root := nvmecli.NewObject()
	one := func(fid uint8, all bool) int {
		res, data, err := connd.Admin(store(), o.device, connd.GetFeaturesCommand(nsid, fid, sel, uuid, cdw11, dataLen))
		if err != nil {
			if all {
				return exitFailure
			}
			return adminFail(stderr, "get-feature", err)
		}
		switch o.output {
		case "binary":
			_, _ = stdout.Write(data)
		case "json":
			nvmecli.FeatureJSON(root, fid, sel, res, data)
		default:
			nvmecli.PrintFeature(stdout, fid, sel, res, data, o.human)
		}
		return exitOK
	}
	code := exitOK
	if fid != 0 {
		code = one(fid, false)
	} else {
		for f := 1; f < 0x100; f++ {
			if f == 0x80 || (f > 0x1a && f < 0x7d) || f > 0x84 {
				continue
			}
			one(uint8(f), true)
		}
	}
	if o.output == "json" && root.Len() > 0 {
		fmt.Fprintln(stdout, root.String())
	}
	return code
}

func runGetLog(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("get-log", stderr)
	var o adminOpts
	var nsid, logLen uint32
	var lid, lsp uint8
	var lpo uint64
	var rae bool
	o.addFlags(fs, false, true)
	fs.Uint32VarP(&nsid, "namespace-id", "n", 0xffffffff, "desired namespace")
	fs.Uint8VarP(&lid, "log-id", "i", 0, "identifier of log to retrieve")
	fs.Uint32VarP(&logLen, "log-len", "l", 0, "how many bytes to retrieve")
	fs.Uint8VarP(&lsp, "lsp", "s", 0, "log specific field")
	fs.Uint64VarP(&lpo, "lpo", "L", 0, "log page offset specifies the location within a log page from where to start returning data")
	fs.BoolVarP(&rae, "rae", "r", false, "retain an asynchronous event (always set here: the daemon keeps its events)")
	if code, ok := o.parse(fs, args, stderr); !ok {
		return code
	}
	if !fs.Changed("log-id") {
		fmt.Fprintln(stderr, "log page id required param")
		return exitUsage
	}
	if logLen == 0 {
		fmt.Fprintln(stderr, "non-zero log-len is required param")
		return exitUsage
	}
	b, err := connd.GetLog(store(), o.device, lid, nsid, lsp, lpo, int(logLen))
	if err != nil {
		return adminFail(stderr, "get-log", err)
	}
	if o.output == "binary" {
		_, _ = stdout.Write(b)
		return exitOK
	}
	fmt.Fprintf(stdout, "Device:%s log-id:%d namespace-id:%#x\n", o.device, lid, nsid)
	nvmecli.HexDump(stdout, b)
	return exitOK
}

func runListSubsys(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list-subsys", stderr)
	var output string
	fs.StringVarP(&output, "output-format", "o", "normal", "Output format: normal|json")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory (default /run/nvmeof)")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	var sts []*hoststate.Controller
	for _, dev := range store().Instances() {
		if st, err := store().Read(dev); err == nil {
			sts = append(sts, st)
		}
	}
	if output == "json" {
		fmt.Fprintln(stdout, nvmecli.ListSubsysJSON(sts))
		return exitOK
	}
	nvmecli.PrintListSubsys(stdout, sts)
	return exitOK
}
