package nvmecli

import (
	"fmt"
	"io"
	"math/big"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The outputs below are nvme-cli 2.x's (nvme-print.c: json_nvme_id_ctrl,
// json_nvme_id_ns, json_smart_log, json_error_log, json_fw_log,
// json_effects_log, json_ana_log and their normal counterparts), field
// for field; the fields of Identify and SMART are in fields.go.

// u128 returns a little-endian 128-bit field in decimal, as nvme-cli 2.3
// prints it in JSON (json_object_add_value_uint128: a string).
func u128(b []byte) string {
	return new(big.Int).SetBytes(reverse(b[:16])).String()
}

// cx formats v as C's "%#x" (0 is "0", not "0x0").
func cx(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

// cstr is C's "%-.*s" of a fixed-size field: up to the first NUL.
func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// IDCtrlJSON is nvme-cli 2.3's id-ctrl -o json (json_nvme_id_ctrl).
func IDCtrlJSON(c *nvmeof.IdentifyController) *Object {
	b := c[:]
	o := &Object{}
	idCtrl.addJSON(o, b, false)
	var psds []*Object
	for i := 0; i <= int(b[263]) && i < 32; i++ { // 32 power state descriptors at most
		p := b[2048+32*i:]
		psds = append(psds, (&Object{}).Add("max_power", uint64(le16(p, 0))).Add("flags", uint64(p[3])).
			Add("entry_lat", uint64(le32(p, 4))).Add("exit_lat", uint64(le32(p, 8))).
			Add("read_tput", uint64(p[12])).Add("read_lat", uint64(p[13])).
			Add("write_tput", uint64(p[14])).Add("write_lat", uint64(p[15])).
			Add("idle_power", uint64(le16(p, 16))).Add("idle_scale", uint64(p[18]>>6)).
			Add("active_power", uint64(le16(p, 20))).Add("active_power_work", uint64(p[22]&7)).
			Add("active_scale", uint64(p[22]>>6)))
	}
	o.Add("psds", psds)
	return o
}

// PrintIDCtrl is nvme-cli 2.3's normal id-ctrl output (with -H, each
// field's decoding after its line).
func PrintIDCtrl(w io.Writer, c *nvmeof.IdentifyController, human bool) {
	b := c[:]
	fmt.Fprintln(w, "NVME Identify Controller:")
	idCtrl.printNormal(w, b, human)
	for i := 0; i <= int(b[263]) && i < 32; i++ { // 32 power state descriptors at most
		ps := b[2048+32*i:]
		flags := ps[3]
		op := "operational"
		if flags&2 != 0 {
			op = "non-operational"
		}
		fmt.Fprintf(w, "ps %6d : mp:%s %s enlat:%d exlat:%d rrt:%d rrl:%d\n", i, psPower(le16(ps, 0), flags&1 != 0), op,
			le32(ps, 4), le32(ps, 8), ps[12], ps[13])
		fmt.Fprintf(w, "            rwt:%d rwl:%d idle_power:%s active_power:%s\n", ps[14], ps[15],
			psScaled(le16(ps, 16), ps[18]>>6), psScaled(le16(ps, 20), ps[22]>>6))
		fmt.Fprintf(w, "            active_power_workload:%s\n", psWorkload(ps[22]&7))
	}
}

// psPower formats a power state's maximum power (MXPS: 0.0001 W units,
// else 0.01 W).
func psPower(mp uint16, mxps bool) string {
	if mxps {
		return fmt.Sprintf("%d.%04dW", mp/10000, mp%10000)
	}
	return fmt.Sprintf("%d.%02dW", mp/100, mp%100)
}

// psScaled formats an idle or active power with its scale (0: not
// reported).
func psScaled(v uint16, scale uint8) string {
	switch scale {
	case 1:
		return fmt.Sprintf("%d.%04dW", v/10000, v%10000)
	case 2:
		return fmt.Sprintf("%d.%02dW", v/100, v%100)
	}
	return "-"
}

// psWorkload is nvme-cli's active power workload hint (APW).
func psWorkload(apw uint8) string {
	switch apw {
	case 1:
		return "1MiB 32 RW, 30s idle"
	case 2:
		return "1MiB SW, 10s idle"
	}
	return "-"
}

func fguid(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// IDNSJSON is nvme-cli 2.3's id-ns -o json (json_nvme_id_ns).
func IDNSJSON(n *nvmeof.IdentifyNamespace) *Object {
	b := n[:]
	o := &Object{}
	idNS.addJSON(o, b, false)
	var lbafs []*Object
	for i := 0; i <= int(b[25]) && i < 64; i++ {
		f := b[128+4*i:]
		lbafs = append(lbafs, (&Object{}).Add("ms", uint64(le16(f, 0))).Add("ds", uint64(f[2])).Add("rp", uint64(f[3]&3)))
	}
	o.Add("lbafs", lbafs)
	return o
}

// PrintIDNS is nvme-cli's normal id-ns output.
func PrintIDNS(w io.Writer, n *nvmeof.IdentifyNamespace, nsid uint32, human bool) {
	b := n[:]
	fmt.Fprintf(w, "NVME Identify Namespace %d:\n", nsid)
	idNS.printNormal(w, b, human)
	cur := int(b[26]&0xf) | int(b[26]>>5&3)<<4
	for i := 0; i <= int(b[25]) && i < 64; i++ {
		f := b[128+4*i:]
		rp := f[3] & 3
		inUse := ""
		if i == cur {
			inUse = "(in use)"
		}
		if human {
			fmt.Fprintf(w, "LBA Format %2d : Metadata Size: %-3d bytes - Data Size: %-2d bytes - Relative Performance: %s %s %s\n",
				i, le16(f, 0), 1<<(f[2]&63), cx(uint64(rp)), [...]string{"Best", "Better", "Good", "Degraded"}[rp], inUse)
			continue
		}
		fmt.Fprintf(w, "lbaf %2d : ms:%-3d lbads:%-2d rp:%s %s\n", i, le16(f, 0), f[2], cx(uint64(rp)), inUse)
	}
}

// SMARTJSON is nvme-cli 2.3's smart-log -o json (json_smart_log); human
// (-H) decodes the critical warning.
func SMARTJSON(l *nvmeof.SMARTLog, human bool) *Object {
	o := &Object{}
	smart.addJSON(o, l[:], human)
	return o
}

// PrintSMART is nvme-cli 2.3's normal smart-log output
// (nvme_show_smart_log); human (-H) decodes the critical warning.
func PrintSMART(w io.Writer, l *nvmeof.SMARTLog, dev string, nsid uint32, human bool) {
	fmt.Fprintf(w, "Smart Log for NVME device:%s namespace-id:%x\n", dev, nsid)
	smart.printNormal(w, l[:], human)
}

// siBytes is nvme-cli's uint128_t_to_si_string: a 128-bit count of units
// of unit bytes, as "%.2Lf %sB" with a decimal (SI) prefix.
func siBytes(b []byte, unit float64) string {
	v, _ := new(big.Float).SetInt(new(big.Int).SetBytes(reverse(b))).Float64()
	v *= unit
	suffix := ""
	for _, s := range []struct {
		mag    float64
		suffix string
	}{{1e30, "Q"}, {1e27, "R"}, {1e24, "Y"}, {1e21, "Z"}, {1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}} {
		if v >= s.mag {
			v /= s.mag
			suffix = s.suffix
			break
		}
	}
	return fmt.Sprintf("%.2f %sB", v, suffix)
}

// reverse returns a little-endian field's bytes in big-endian order.
func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[i] = b[len(b)-1-i]
	}
	return r
}

func ErrorLogJSON(b []byte) *Object {
	var errs []*Object
	for off := 0; off+nvmeof.ErrorLogEntrySize <= len(b); off += nvmeof.ErrorLogEntrySize {
		e := b[off:]
		sf := le16(e, 12)
		errs = append(errs, (&Object{}).Add("error_count", le64(e, 0)).Add("sqid", uint64(le16(e, 8))).
			Add("cmdid", uint64(le16(e, 10))).Add("status_field", uint64(sf>>1)).Add("phase_tag", uint64(sf&1)).
			Add("parm_error_location", uint64(le16(e, 14))).Add("lba", le64(e, 16)).Add("nsid", uint64(le32(e, 24))).
			Add("vs", uint64(e[28])).Add("trtype", uint64(e[29])).Add("cs", le64(e, 32)).
			Add("trtype_spec_info", uint64(le16(e, 40))))
	}
	return (&Object{}).Add("errors", errs)
}

// PrintErrorLog is nvme-cli 2.3's normal error-log output
// (nvme_show_error_log).
func PrintErrorLog(w io.Writer, b []byte, dev string) {
	n := len(b) / nvmeof.ErrorLogEntrySize
	fmt.Fprintf(w, "Error Log Entries for device:%s entries:%d\n", dev, n)
	fmt.Fprintln(w, ".................")
	for i := 0; i < n; i++ {
		e := b[i*nvmeof.ErrorLogEntrySize:]
		sf := le16(e, 12)
		fmt.Fprintf(w, " Entry[%2d]   \n", i)
		fmt.Fprintln(w, ".................")
		fmt.Fprintf(w, "error_count\t: %d\n", le64(e, 0))
		fmt.Fprintf(w, "sqid\t\t: %d\n", le16(e, 8))
		fmt.Fprintf(w, "cmdid\t\t: %s\n", cx(uint64(le16(e, 10))))
		fmt.Fprintf(w, "status_field\t: %s(%s)\n", cx(uint64(sf>>1)), StatusString(sf>>1))
		fmt.Fprintf(w, "phase_tag\t: %s\n", cx(uint64(sf&1)))
		fmt.Fprintf(w, "parm_err_loc\t: %s\n", cx(uint64(le16(e, 14))))
		fmt.Fprintf(w, "lba\t\t: %s\n", cx(le64(e, 16)))
		fmt.Fprintf(w, "nsid\t\t: %s\n", cx(uint64(le32(e, 24))))
		fmt.Fprintf(w, "vs\t\t: %d\n", e[28])
		fmt.Fprintf(w, "trtype\t\t: %s\n", trtypeString(e[29]))
		fmt.Fprintf(w, "cs\t\t: %s\n", cx(le64(e, 32)))
		fmt.Fprintf(w, "trtype_spec_info: %s\n", cx(uint64(le16(e, 40))))
		fmt.Fprintln(w, ".................")
	}
}

// fwString is nvme-cli's fw_to_string: the revision's printable bytes.
func fwString(b []byte) string {
	r := make([]byte, 8)
	for i := range r {
		if b[i] >= '!' && b[i] <= '~' {
			r[i] = b[i]
		} else {
			r[i] = '.'
		}
	}
	return string(r)
}

func FWLogJSON(l *nvmeof.FirmwareSlotLog, dev string) *Object {
	b := l[:]
	fw := (&Object{}).Add("Active Firmware Slot (afi)", uint64(b[0]))
	for i := 0; i < 7; i++ {
		s := b[8+8*i:]
		if s[0] != 0 {
			fw.Add(fmt.Sprintf("Firmware Rev Slot %d", i+1), fmt.Sprintf("%d (%s)", le64(s, 0), fwString(s)))
		}
	}
	return (&Object{}).Add(dev, fw)
}

// PrintFWLog is nvme-cli's normal fw-log output.
func PrintFWLog(w io.Writer, l *nvmeof.FirmwareSlotLog, dev string) {
	b := l[:]
	fmt.Fprintf(w, "Firmware Log for device:%s\n", dev)
	fmt.Fprintf(w, "afi  : %#x\n", b[0])
	for i := 0; i < 7; i++ {
		s := b[8+8*i:]
		if s[0] != 0 {
			fmt.Fprintf(w, "frs%d : %#016x (%s)\n", i+1, le64(s, 0), fwString(s))
		}
	}
}

// adminCmdNames and ioCmdNames are nvme-cli's nvme_cmd_to_string.
var adminCmdNames = map[int]string{
	0x00: "Delete I/O Submission Queue", 0x01: "Create I/O Submission Queue", 0x02: "Get Log Page",
	0x04: "Delete I/O Completion Queue", 0x05: "Create I/O Completion Queue", 0x06: "Identify",
	0x08: "Abort", 0x09: "Set Features", 0x0a: "Get Features", 0x0c: "Asynchronous Event Request",
	0x0d: "Namespace Management", 0x10: "Firmware Commit", 0x11: "Firmware Image Download",
	0x14: "Device Self-test", 0x15: "Namespace Attachment", 0x18: "Keep Alive", 0x19: "Directive Send",
	0x1a: "Directive Receive", 0x1c: "Virtualization Management", 0x1d: "NVMEe-MI Send",
	0x1e: "NVMEe-MI Receive", 0x7c: "Doorbell Buffer Config", 0x80: "Format NVM", 0x81: "Security Send",
	0x82: "Security Receive", 0x84: "Sanitize", 0x86: "Get LBA Status",
}

var ioCmdNames = map[int]string{
	0x00: "Flush", 0x01: "Write", 0x02: "Read", 0x04: "Write Uncorrectable", 0x05: "Compare",
	0x08: "Write Zeroes", 0x09: "Dataset Management", 0x0c: "Verify", 0x0d: "Reservation Register",
	0x0e: "Reservation Report", 0x11: "Reservation Acquire", 0x15: "Reservation Release", 0x19: "Copy",
}

func cmdName(m map[int]string, op int) string {
	if s, ok := m[op]; ok {
		return s
	}
	return "Unknown"
}

// EffectsJSON is nvme-cli 2.3's effects-log -o json: an array with one
// object per command set read.
func EffectsJSON(l *nvmeof.CommandEffectsLog, csi uint8) string {
	acs, iocs := &Object{}, &Object{}
	for op := 0; op < 256; op++ {
		if e := l.ACS(uint8(op)); e&1 != 0 {
			acs.Add(fmt.Sprintf("ACS_%d (%s)", op, cmdName(adminCmdNames, op)), uint64(e))
		}
	}
	for op := 0; op < 256; op++ {
		if e := l.IOCS(uint8(op)); e&1 != 0 {
			iocs.Add(fmt.Sprintf("IOCS_%d (%s)", op, cmdName(ioCmdNames, op)), uint64(e))
		}
	}
	return Array((&Object{}).Add("command_set_identifier", uint64(csi)).Add("admin_cmd_set", acs).Add("io_cmd_set", iocs))
}

// PrintEffects is nvme-cli 2.3's normal effects-log output.
func PrintEffects(w io.Writer, l *nvmeof.CommandEffectsLog, csi uint8, human bool) {
	title := "Unknown"
	if csi == 0 {
		title = "NVM"
	}
	fmt.Fprintf(w, "%s Command Set Log Page\n%s\n", title, strings.Repeat("-", 80))
	seg := func(title, prefix string, width int, names map[int]string, get func(uint8) uint32) {
		fmt.Fprintf(w, "%s\n", title)
		for op := 0; op < 256; op++ {
			e := get(uint8(op))
			if e&1 == 0 {
				continue
			}
			fmt.Fprintf(w, "%s%-*d[%-32s] %08x", prefix, width, op, cmdName(names, op), e)
			if human {
				fmt.Fprint(w, effectsHuman(e))
			} else {
				fmt.Fprintln(w)
			}
		}
		fmt.Fprintln(w)
	}
	seg("Admin Commands", "ACS", 6, adminCmdNames, l.ACS)
	seg("I/O Commands", "IOCS", 5, ioCmdNames, l.IOCS)
}

// effectsHuman is nvme-cli 2.3's nvme_show_effects_log_human: each flag
// with + or -, then the command submission and execution restriction
// (CSE, bits 17:16 as libnvme masks them), and the line's end.
func effectsHuman(e uint32) string {
	var b strings.Builder
	b.WriteString("  CSUPP+")
	for _, f := range []struct {
		bit  uint32
		name string
	}{{1 << 1, "LBCC"}, {1 << 2, "NCC"}, {1 << 3, "NIC"}, {1 << 4, "CCC"}, {1 << 19, "USS"}} {
		sign := "-"
		if e&f.bit != 0 {
			sign = "+"
		}
		fmt.Fprintf(&b, "  %s%s", f.name, sign)
	}
	switch e >> 16 & 3 {
	case 0:
		b.WriteString("  No command restriction\n")
	case 1:
		b.WriteString("  No other command for same namespace\n")
	case 2:
		b.WriteString("  No other command for any namespace\n")
	default:
		b.WriteString("  Reserved CSE\n")
	}
	return b.String()
}

func ANAJSON(l nvmeof.ANALog, dev string) *Object {
	o := (&Object{}).Add("Asymmetric Namespace Access Log for NVMe device", dev).
		Add("chgcnt", l.ChangeCount).Add("ngrps", uint64(len(l.Groups)))
	var descs []*Object
	for _, g := range l.Groups {
		var ns []*Object
		for _, id := range g.NSIDs {
			ns = append(ns, (&Object{}).Add("nsid", uint64(id)))
		}
		descs = append(descs, (&Object{}).Add("grpid", uint64(g.ID)).Add("nnsids", uint64(len(g.NSIDs))).
			Add("chgcnt", g.ChangeCount).Add("state", anaStateString(g.State)).Add("NSIDS", ns))
	}
	return o.Add("ANA DESC LIST ", descs)
}

// anaStateString is nvme-cli's nvme_ana_state_to_string.
func anaStateString(s nvmeof.ANAState) string {
	switch s {
	case 1:
		return "optimized"
	case 2:
		return "non-optimized"
	case 3:
		return "inaccessible"
	case 4:
		return "persistent-loss"
	case 0xf:
		return "change"
	}
	return "invalid state"
}

// PrintANA is nvme-cli's normal ana-log output.
func PrintANA(w io.Writer, l nvmeof.ANALog, dev string) {
	fmt.Fprintf(w, "Asymmetric Namespace Access Log for NVMe device: %s\n", dev)
	fmt.Fprintf(w, "ANA LOG HEADER :-\n")
	fmt.Fprintf(w, "chgcnt\t:\t%d\n", l.ChangeCount)
	fmt.Fprintf(w, "ngrps\t:\t%d\n", len(l.Groups))
	fmt.Fprintf(w, "ANA Log Desc :-\n")
	for _, g := range l.Groups {
		fmt.Fprintf(w, "grpid\t:\t%d\n", g.ID)
		fmt.Fprintf(w, "nnsids\t:\t%d\n", len(g.NSIDs))
		fmt.Fprintf(w, "chgcnt\t:\t%d\n", g.ChangeCount)
		fmt.Fprintf(w, "state\t:\t%s\n", anaStateString(g.State))
		for _, id := range g.NSIDs {
			fmt.Fprintf(w, "\tnsid\t:\t%d\n", id)
		}
		fmt.Fprintln(w)
	}
}

// featureNames is nvme-cli's nvme_feature_to_string.
var featureNames = map[uint8]string{
	0x01: "Arbitration", 0x02: "Power Management", 0x03: "LBA Range Type", 0x04: "Temperature Threshold",
	0x05: "Error Recovery", 0x06: "Volatile Write Cache", 0x07: "Number of Queues",
	0x08: "Interrupt Coalescing", 0x09: "Interrupt Vector Configuration", 0x0a: "Write Atomicity Normal",
	0x0b: "Async Event Configuration", 0x0c: "Autonomous Power State Transition",
	0x0d: "Host Memory Buffer", 0x0e: "Timestamp", 0x0f: "Keep Alive Timer",
	0x10: "Host Controlled Thermal Management", 0x11: "Non-Operational Power State Config",
	0x12: "Read Recovery Level", 0x13: "Predictable Latency Mode Config",
	0x14: "Predictable Latency Mode Window", 0x15: "LBA Status Information Report Interval",
	0x16: "Host Behavior Support", 0x17: "Sanitize Config", 0x18: "Endurance Group Event Configuration",
	0x19: "I/O Command Set Profile", 0x1a: "Spinup Control", 0x7d: "Enhanced Controller Metadata",
	0x7e: "Controller Metadata", 0x7f: "Namespace Metadata", 0x80: "Software Progress",
	0x81: "Host Identifier", 0x82: "Reservation Notification Mask", 0x83: "Reservation Persistence",
	0x84: "Namespace Write Protection Config",
}

var selectNames = [...]string{"Current", "Default", "Saved", "Supported capabilities"}

// cHexWidth formats v as C's "%#0*x" with width w.
func cHexWidth(v uint64, w int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", w, 0)
	}
	return fmt.Sprintf("0x%0*x", w-2, v)
}

// PrintFeature is nvme-cli 2.3's get-feature output (get_feature_id_print):
// the value line, then with select 3 the capabilities, else with -H the
// decoded fields (nvme_feature_show_fields), else the data in hex.
func PrintFeature(w io.Writer, fid, sel uint8, result uint32, data []byte, human bool) {
	name, ok := featureNames[fid]
	if !ok {
		name = "Unknown"
	}
	width := 8
	if result != 0 {
		width = 10
	}
	fmt.Fprintf(w, "get-feature:%s (%s), %s value:%s\n", cHexWidth(uint64(fid), 4), name, selectNames[sel&3], cHexWidth(uint64(result), width))
	switch {
	case sel == 3:
		for _, c := range []struct {
			bit  uint32
			text string
		}{{1, "saveable"}, {2, "per-namespace"}, {4, "changeable"}} {
			if result&c.bit != 0 {
				fmt.Fprintf(w, "  Feature is %s\n", c.text)
			}
		}
	case human:
		showFeatureFields(w, fid, result, data)
	case len(data) > 0:
		HexDump(w, data)
	}
}

// showFeatureFields is nvme-cli 2.3's nvme_feature_show_fields for the
// features whose value is in the result (and the host identifier).
func showFeatureFields(w io.Writer, fid uint8, r uint32, data []byte) {
	onOff := func(b uint32, yes, no string) string {
		if b != 0 {
			return yes
		}
		return no
	}
	switch fid {
	case 0x01:
		fmt.Fprintf(w, "\tHigh Priority Weight   (HPW): %d\n", r>>24+1)
		fmt.Fprintf(w, "\tMedium Priority Weight (MPW): %d\n", r>>16&0xff+1)
		fmt.Fprintf(w, "\tLow Priority Weight    (LPW): %d\n", r>>8&0xff+1)
		fmt.Fprint(w, "\tArbitration Burst       (AB): ")
		if r&7 == 7 {
			fmt.Fprintln(w, "No limit")
		} else {
			fmt.Fprintln(w, 1<<(r&7))
		}
	case 0x02:
		wh := r >> 5 & 7
		hint := "Reserved"
		switch wh {
		case 0:
			hint = "No Workload"
		case 1:
			hint = "Extended Idle Period with a Burst of Random Writes"
		case 2:
			hint = "Heavy Sequential Writes"
		}
		fmt.Fprintf(w, "\tWorkload Hint (WH): %d - %s\n", wh, hint)
		fmt.Fprintf(w, "\tPower State   (PS): %d\n", r&0x1f)
	case 0x04:
		thsel, tmpsel := r>>20&3, r>>16&0xf
		fmt.Fprintf(w, "\tThreshold Type Select         (THSEL): %d - %s\n", thsel,
			[...]string{"Over Temperature Threshold", "Under Temperature Threshold", "Reserved", "Reserved"}[thsel])
		sensor := "Reserved"
		switch {
		case tmpsel == 0:
			sensor = "Composite Temperature"
		case tmpsel <= 8:
			sensor = fmt.Sprintf("Temperature Sensor %d", tmpsel)
		}
		fmt.Fprintf(w, "\tThreshold Temperature Select (TMPSEL): %d - %s\n", tmpsel, sensor)
		fmt.Fprintf(w, "\tTemperature Threshold         (TMPTH): %d°C (%d Kelvin)\n", int(r&0xffff)-273, r&0xffff)
	case 0x05:
		fmt.Fprintf(w, "\tDeallocated or Unwritten Logical Block Error Enable (DULBE): %s\n", onOff(r>>16&1, "Enabled", "Disabled"))
		fmt.Fprintf(w, "\tTime Limited Error Recovery                          (TLER): %d ms\n", (r&0xffff)*100)
	case 0x06:
		fmt.Fprintf(w, "\tVolatile Write Cache Enable (WCE): %s\n", onOff(r&1, "Enabled", "Disabled"))
	case 0x07:
		fmt.Fprintf(w, "\tNumber of IO Completion Queues Allocated (NCQA): %d\n", r>>16+1)
		fmt.Fprintf(w, "\tNumber of IO Submission Queues Allocated (NSQA): %d\n", r&0xffff+1)
	case 0x08:
		fmt.Fprintf(w, "\tAggregation Time     (TIME): %d usec\n", (r>>8&0xff)*100)
		fmt.Fprintf(w, "\tAggregation Threshold (THR): %d\n", r&0xff+1)
	case 0x09:
		fmt.Fprintf(w, "\tCoalescing Disable (CD): %s\n", onOff(r>>16&1, "True", "False"))
		fmt.Fprintf(w, "\tInterrupt Vector   (IV): %d\n", r&0xffff)
	case 0x0a:
		fmt.Fprintf(w, "\tDisable Normal (DN): %s\n", onOff(r&1, "True", "False"))
	case 0x0b:
		for _, n := range []struct {
			text string
			bits uint32
		}{
			{"Discovery Log Page Change Notices                         ", r >> 31 & 1},
			{"Endurance Group Event Aggregate Log Change Notices        ", r >> 14 & 1},
			{"LBA Status Information Notices                            ", r >> 13 & 1},
			{"Predictable Latency Event Aggregate Log Change Notices    ", r >> 12 & 1},
			{"Asymmetric Namespace Access Change Notices                ", r >> 11 & 1},
			{"Telemetry Log Notices                                     ", r >> 10 & 1},
			{"Firmware Activation Notices                               ", r >> 9 & 1},
			{"Namespace Attribute Notices                               ", r >> 8 & 1},
			{"SMART / Health Critical Warnings                          ", r & 0xff},
		} {
			fmt.Fprintf(w, "\t%s: %s\n", n.text, onOff(n.bits, "Send async event", "Do not send async event"))
		}
	case 0x0f:
		fmt.Fprintf(w, "\tKeep Alive Timeout (KATO) in milliseconds: %d\n", r)
	case 0x10:
		fmt.Fprintf(w, "\tThermal Management Temperature 1 (TMT1) : %d Kelvin (%d°C)\n", r>>16, int(r>>16)-273)
		fmt.Fprintf(w, "\tThermal Management Temperature 2 (TMT2) : %d Kelvin (%d°C)\n", r&0xffff, int(r&0xffff)-273)
	case 0x81:
		if len(data) >= 8 {
			fmt.Fprintf(w, "\tHost Identifier (HOSTID):  %d\n", le64(data, 0))
		}
	}
}

// HexDump is nvme-cli's d(buf, len, 16, 1).
func HexDump(w io.Writer, b []byte) {
	var sb strings.Builder
	sb.WriteString("     ")
	for i := 0; i <= 15; i++ {
		fmt.Fprintf(&sb, "%3x", i)
	}
	ascii := make([]byte, 0, 16)
	for i, c := range b {
		if i%16 == 0 {
			fmt.Fprintf(&sb, "\n%04x:", i)
		}
		fmt.Fprintf(&sb, " %02x", c)
		if c >= '!' && c <= '~' {
			ascii = append(ascii, c)
		} else {
			ascii = append(ascii, '.')
		}
		if (i+1)%16 == 0 {
			fmt.Fprintf(&sb, " \"%s\"", ascii)
			ascii = ascii[:0]
		}
	}
	if len(ascii) > 0 {
		pad := 16 - len(ascii)
		fmt.Fprintf(&sb, " %*s \"%s\"", 3*pad, "", ascii)
	}
	sb.WriteString("\n")
	_, _ = io.WriteString(w, sb.String())
}
