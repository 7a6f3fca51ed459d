package nvmecli

import (
	"fmt"
	"io"
)

// nvme-cli 2.3's -H (human-readable) decoding of Identify fields
// (nvme-print.c: nvme_show_id_ns_*, nvme_show_id_ctrl_*), line for line.

// bitf prints one line of a decoded field: "  [hi:lo] : %#x\ttext".
func bitf(w io.Writer, hi, lo int, v uint8, format string, a ...any) {
	hl(w, fmt.Sprintf("  [%d:%d] : ", hi, lo), uint32(v), format, a...)
}

// not is nvme-cli's `x ? "" : "Not "`.
func not(b uint8) string {
	if b != 0 {
		return ""
	}
	return "Not "
}

// pick is C's `b ? yes : no`.
func pick(b uint8, yes, no string) string {
	if b != 0 {
		return yes
	}
	return no
}

func showNSFeat(w io.Writer, v uint8) {
	if r := v >> 5; r != 0 {
		bitf(w, 7, 5, r, "Reserved")
	}
	bitf(w, 4, 4, v>>4&1, "NPWG, NPWA, NPDG, NPDA, and NOWS are %sSupported", not(v>>4&1))
	bitf(w, 3, 3, v>>3&1, "NGUID and EUI64 fields if non-zero, %sReused", pick(v>>3&1, "Never ", ""))
	bitf(w, 2, 2, v>>2&1, "Deallocated or Unwritten Logical Block error %sSupported", not(v>>2&1))
	bitf(w, 1, 1, v>>1&1, "Namespace uses %s", pick(v>>1&1, "NAWUN, NAWUPF, and NACWU", "AWUN, AWUPF, and ACWU"))
	bitf(w, 0, 0, v&1, "Thin Provisioning %sSupported", not(v&1))
	fmt.Fprintln(w)
}

func showFLBAS(w io.Writer, v uint8) {
	if r := v >> 7; r != 0 {
		bitf(w, 7, 7, r, "Reserved")
	}
	bitf(w, 6, 5, v>>5&3, "Most significant 2 bits of Current LBA Format Selected")
	bitf(w, 4, 4, v>>4&1, "Metadata Transferred %s", pick(v>>4&1, "at End of Data LBA", "in Separate Contiguous Buffer"))
	bitf(w, 3, 0, v&0xf, "Least significant 4 bits of Current LBA Format Selected")
	fmt.Fprintln(w)
}

func showMC(w io.Writer, v uint8) {
	if r := v >> 2; r != 0 {
		bitf(w, 7, 2, r, "Reserved")
	}
	bitf(w, 1, 1, v>>1&1, "Metadata Pointer %sSupported", not(v>>1&1))
	bitf(w, 0, 0, v&1, "Metadata as Part of Extended Data LBA %sSupported", not(v&1))
	fmt.Fprintln(w)
}

func showDPC(w io.Writer, v uint8) {
	if r := v >> 5; r != 0 {
		bitf(w, 7, 5, r, "Reserved")
	}
	bitf(w, 4, 4, v>>4&1, "Protection Information Transferred as Last 8 Bytes of Metadata %sSupported", not(v>>4&1))
	bitf(w, 3, 3, v>>3&1, "Protection Information Transferred as First 8 Bytes of Metadata %sSupported", not(v>>3&1))
	bitf(w, 2, 2, v>>2&1, "Protection Information Type 3 %sSupported", not(v>>2&1))
	bitf(w, 1, 1, v>>1&1, "Protection Information Type 2 %sSupported", not(v>>1&1))
	bitf(w, 0, 0, v&1, "Protection Information Type 1 %sSupported", not(v&1))
	fmt.Fprintln(w)
}

func showDPS(w io.Writer, v uint8) {
	if r := v >> 4; r != 0 {
		bitf(w, 7, 4, r, "Reserved")
	}
	bitf(w, 3, 3, v>>3&1, "Protection Information is Transferred as %s 8 Bytes of Metadata", pick(v>>3&1, "First", "Last"))
	pit := v & 7
	s := "Reserved Enabled"
	switch pit {
	case 3:
		s = "Type 3 Enabled"
	case 2:
		s = "Type 2 Enabled"
	case 1:
		s = "Type 1 Enabled"
	case 0:
		s = "Disabled"
	}
	bitf(w, 2, 0, pit, "Protection Information %s", s)
	fmt.Fprintln(w)
}

func showNMIC(w io.Writer, v uint8) {
	if r := v >> 1; r != 0 {
		bitf(w, 7, 1, r, "Reserved")
	}
	bitf(w, 0, 0, v&1, "Namespace Multipath %sCapable", not(v&1))
	fmt.Fprintln(w)
}

func showRescap(w io.Writer, v uint8) {
	bitf(w, 7, 7, v>>7&1, "Ignore Existing Key - Used as defined in revision %s", pick(v>>7&1, "1.3 or later", "1.2.1 or earlier"))
	bitf(w, 6, 6, v>>6&1, "Exclusive Access - All Registrants %sSupported", not(v>>6&1))
	bitf(w, 5, 5, v>>5&1, "Write Exclusive - All Registrants %sSupported", not(v>>5&1))
	bitf(w, 4, 4, v>>4&1, "Exclusive Access - Registrants Only %sSupported", not(v>>4&1))
	bitf(w, 3, 3, v>>3&1, "Write Exclusive - Registrants Only %sSupported", not(v>>3&1))
	bitf(w, 2, 2, v>>2&1, "Exclusive Access %sSupported", not(v>>2&1))
	bitf(w, 1, 1, v>>1&1, "Write Exclusive %sSupported", not(v>>1&1))
	bitf(w, 0, 0, v&1, "Persist Through Power Loss %sSupported", not(v&1))
	fmt.Fprintln(w)
}

func showFPI(w io.Writer, v uint8) {
	fpis, fpii := v>>7, v&0x7f
	bitf(w, 7, 7, fpis, "Format Progress Indicator %sSupported", not(fpis))
	if fpis != 0 || fpii != 0 {
		bitf(w, 6, 0, fpii, "Format Progress Indicator (Remaining %d%%)", fpii)
	}
	fmt.Fprintln(w)
}

func showDLFeat(w io.Writer, v uint8) {
	if r := v >> 5; r != 0 {
		bitf(w, 7, 5, r, "Reserved")
	}
	bitf(w, 4, 4, v>>4&1, "Guard Field of Deallocated Logical Blocks is set to %s", pick(v>>4&1, "CRC of The Value Read", "0xFFFF"))
	bitf(w, 3, 3, v>>3&1, "Deallocate Bit in the Write Zeroes Command is %sSupported", not(v>>3&1))
	val := v & 7
	s := "Reserved Value"
	switch val {
	case 2:
		s = "0xFF"
	case 1:
		s = "0x00"
	case 0:
		s = "Not Reported"
	}
	bitf(w, 2, 0, val, "Bytes Read From a Deallocated Logical Block and its Metadata are %s", s)
	fmt.Fprintln(w)
}

// hl prints one line of a decoded field with nvme-cli's own bit-range tag
// ("  [7:4] : ", " [31:24]: ", …): tag, the value as %#x, a tab, text.
func hl(w io.Writer, tag string, v uint32, format string, a ...any) {
	fmt.Fprintf(w, "%s%s\t%s\n", tag, cx(uint64(v)), fmt.Sprintf(format, a...))
}

// notU is not for a wider field.
func notU(b uint32) string { return not(uint8(b & 1)) }

// pickU is pick for a wider field.
func pickU(b uint32, yes, no string) string { return pick(uint8(b&1), yes, no) }

// tempLine is the -H line of a temperature threshold.
func tempLine(w io.Writer, k uint16, what string) {
	fmt.Fprintf(w, " [15:0] : %d°C (%d Kelvin)\t%s\n\n", int(k)-273, k, what)
}

// showIDCtrlHuman prints the -H decoding that nvme-cli 2.3 prints after
// the id-ctrl field name (nvme_show_id_ctrl_<name>), nothing for a field
// without one.
func showIDCtrlHuman(w io.Writer, f *field, b []byte) {
	name := f.name
	fv := uint32(0)
	if f.kind <= u64 {
		fv = uint32(f.uint(b))
	}
	bits := func(v uint32, hi, lo uint) uint32 { return v >> lo & (1<<(hi-lo+1) - 1) }
	switch name {
	case "cmic":
		v := fv
		if r := bits(v, 7, 4); r != 0 {
			hl(w, "  [7:4] : ", r, "Reserved")
		}
		hl(w, "  [3:3] : ", bits(v, 3, 3), "ANA %ssupported", pickU(bits(v, 3, 3), "", "not "))
		hl(w, "  [2:2] : ", bits(v, 2, 2), "%s", pickU(bits(v, 2, 2), "SR-IOV", "PCI"))
		hl(w, "  [1:1] : ", bits(v, 1, 1), "%s Controller", pickU(bits(v, 1, 1), "Multi", "Single"))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "%s Port", pickU(bits(v, 0, 0), "Multi", "Single"))
	case "oaes":
		v := fv
		hl(w, "  [31:31] : ", bits(v, 31, 31), "Discovery Log Change Notice %sSupported", notU(bits(v, 31, 31)))
		if r := bits(v, 30, 28); r != 0 {
			hl(w, "  [30:28] : ", r, "Reserved")
		}
		hl(w, "  [27:27] : ", bits(v, 27, 27), "Zone Descriptor Changed Notices %sSupported", notU(bits(v, 27, 27)))
		if r := bits(v, 26, 16); r != 0 {
			hl(w, "  [26:16] : ", r, "Reserved")
		}
		hl(w, "  [15:15] : ", bits(v, 15, 15), "Normal NSS Shutdown Event %sSupported", notU(bits(v, 15, 15)))
		hl(w, "  [14:14] : ", bits(v, 14, 14), "Endurance Group Event Aggregate Log Page Change Notice %sSupported", notU(bits(v, 14, 14)))
		hl(w, "  [13:13] : ", bits(v, 13, 13), "LBA Status Information Notices %sSupported", notU(bits(v, 13, 13)))
		hl(w, "  [12:12] : ", bits(v, 12, 12), "Predictable Latency Event Aggregate Log Change Notices %sSupported", notU(bits(v, 12, 12)))
		hl(w, "  [11:11] : ", bits(v, 11, 11), "Asymmetric Namespace Access Change Notices %sSupported", notU(bits(v, 11, 11)))
		if r := bits(v, 10, 10); r != 0 {
			hl(w, "  [10:10] : ", r, "Reserved")
		}
		hl(w, "  [9:9] : ", bits(v, 9, 9), "Firmware Activation Notices %sSupported", notU(bits(v, 9, 9)))
		hl(w, "  [8:8] : ", bits(v, 8, 8), "Namespace Attribute Changed Event %sSupported", notU(bits(v, 8, 8)))
		if r := bits(v, 7, 0); r != 0 {
			hl(w, "  [7:0] : ", r, "Reserved")
		}
	case "ctratt":
		v := fv
		if r := v >> 20; r != 0 {
			hl(w, " [31:20] : ", r, "Reserved")
		}
		hl(w, "  [19:19] : ", bits(v, 19, 19), "Flexible Data Placement %sSupported", notU(bits(v, 19, 19)))
		if r := bits(v, 18, 16); r != 0 {
			hl(w, "  [18:16] : ", r, "Reserved")
		}
		for _, f := range []struct {
			bit  uint
			text string
		}{{15, "Extended LBA Formats"}, {14, "Delete NVM Set"}, {13, "Delete Endurance Group"}, {12, "Variable Capacity Management"},
			{11, "Fixed Capacity Management"}, {10, "Multi Domain Subsystem"}, {9, "UUID List"}, {8, "SQ Associations"},
			{7, "Namespace Granularity"}, {6, "Traffic Based Keep Alive"}, {5, "Predictable Latency Mode"}, {4, "Endurance Groups"},
			{3, "Read Recovery Levels"}, {2, "NVM Sets"}, {1, "Non-Operational Power State Permissive"}, {0, "128-bit Host Identifier"}} {
			b := bits(v, f.bit, f.bit)
			hl(w, fmt.Sprintf("  [%d:%d] : ", f.bit, f.bit), b, "%s %sSupported", f.text, notU(b))
		}
	case "cntrltype":
		v := fv
		hl(w, "  [7:2] : ", bits(v, 7, 2), "Reserved")
		hl(w, "  [1:0] : ", v, "%s", [...]string{"Controller type not reported", "I/O Controller", "Discovery Controller", "Administrative Controller"}[v&3])
		return // nvme-cli prints no blank line after this one
	case "nvmsr":
		v := fv
		if r := v >> 2 & 0xfc; r != 0 {
			hl(w, " [7:2] : ", r, "Reserved")
		}
		hl(w, "  [1:1] : ", bits(v, 1, 1), "NVM subsystem %spart of an Enclosure", notU(bits(v, 1, 1)))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "NVM subsystem %spart of an Storage Device", notU(bits(v, 0, 0)))
	case "vwci":
		v := fv
		hl(w, "  [7:7] : ", bits(v, 7, 7), "VPD Write Cycles Remaining field is %svalid.", notU(bits(v, 7, 7)))
		hl(w, "  [6:0] : ", v&0xfe, "VPD Write Cycles Remaining ")
	case "mec":
		v := fv
		if r := v >> 2 & 0xfc; r != 0 {
			hl(w, " [7:2] : ", r, "Reserved")
		}
		hl(w, "  [1:1] : ", bits(v, 1, 1), "NVM subsystem %scontains a Management Endpoint on a PCIe port", notU(bits(v, 1, 1)))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "NVM subsystem %scontains a Management Endpoint on an SMBus/I2C port", notU(bits(v, 0, 0)))
	case "oacs":
		v := fv
		if r := bits(v, 15, 11); r != 0 {
			hl(w, " [15:11] : ", r, "Reserved")
		}
		hl(w, "  [10:10] : ", bits(v, 10, 10), "Lockdown Command and Feature %sSupported", notU(bits(v, 10, 10)))
		for _, f := range []struct {
			bit  uint
			text string
		}{{9, "Get LBA Status Capability"}, {8, "Doorbell Buffer Config"}, {7, "Virtualization Management"}, {6, "NVMe-MI Send and Receive"},
			{5, "Directives"}, {4, "Device Self-test"}, {3, "NS Management and Attachment"}, {2, "FW Commit and Download"},
			{1, "Format NVM"}, {0, "Security Send and Receive"}} {
			b := bits(v, f.bit, f.bit)
			hl(w, fmt.Sprintf("  [%d:%d] : ", f.bit, f.bit), b, "%s %sSupported", f.text, notU(b))
		}
	case "frmw":
		v := fv
		if r := bits(v, 7, 6); r != 0 {
			hl(w, "  [7:6] : ", r, "Reserved")
		}
		hl(w, "  [5:5] : ", bits(v, 5, 5), "Multiple FW or Boot Update Detection %sSupported", notU(bits(v, 5, 5)))
		hl(w, "  [4:4] : ", bits(v, 4, 4), "Firmware Activate Without Reset %sSupported", notU(bits(v, 4, 4)))
		hl(w, "  [3:1] : ", bits(v, 3, 1), "Number of Firmware Slots")
		hl(w, "  [0:0] : ", bits(v, 0, 0), "Firmware Slot 1 Read%s", pickU(bits(v, 0, 0), "-Only", "/Write"))
	case "lpa":
		v := fv
		if r := bits(v, 7, 7); r != 0 {
			hl(w, "  [7:7] : ", r, "Reserved")
		}
		hl(w, "  [6:6] : ", bits(v, 6, 6), "Telemetry Log Data Area 4 %sSupported", notU(bits(v, 6, 6)))
		hl(w, "  [5:5] : ", bits(v, 5, 5), "LID 0x0, Scope of each command in LID 0x5, 0x12, 0x13 %sSupported", notU(bits(v, 5, 5)))
		hl(w, "  [4:4] : ", bits(v, 4, 4), "Persistent Event log %sSupported", notU(bits(v, 4, 4)))
		hl(w, "  [3:3] : ", bits(v, 3, 3), "Telemetry host/controller initiated log page %sSupported", notU(bits(v, 3, 3)))
		hl(w, "  [2:2] : ", bits(v, 2, 2), "Extended data for Get Log Page %sSupported", notU(bits(v, 2, 2)))
		hl(w, "  [1:1] : ", bits(v, 1, 1), "Command Effects Log Page %sSupported", notU(bits(v, 1, 1)))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "SMART/Health Log Page per NS %sSupported", notU(bits(v, 0, 0)))
	case "elpe":
		fmt.Fprintf(w, "  [7:0] : %d (0's based)\tError Log Page Entries (ELPE)\n", fv)
	case "npss":
		fmt.Fprintf(w, "  [7:0] : %d (0's based)\tNumber of Power States Support (NPSS)\n", fv)
	case "avscc", "icsvscc":
		v, what := fv, "Admin"
		if name == "icsvscc" {
			what = "NVM"
		}
		if r := v >> 1; r != 0 {
			hl(w, "  [7:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "%s Vendor Specific Commands uses %s Format", what, pickU(v&1, "NVMe", "Vendor Specific"))
	case "apsta":
		v := fv
		if r := v >> 1; r != 0 {
			hl(w, "  [7:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "Autonomous Power State Transitions %sSupported", notU(v&1))
	case "wctemp":
		tempLine(w, uint16(fv), "Warning Composite Temperature Threshold (WCTEMP)")
		return
	case "cctemp":
		tempLine(w, uint16(fv), "Critical Composite Temperature Threshold (CCTEMP)")
		return
	case "tnvmcap":
		fmt.Fprintf(w, "[127:0] : %s\n\tTotal NVM Capacity (TNVMCAP)\n", u128(f.raw(b)))
	case "unvmcap":
		fmt.Fprintf(w, "[127:0] : %s\n\tUnallocated NVM Capacity (UNVMCAP)\n", u128(f.raw(b)))
	case "rpmbs":
		v := fv
		hl(w, " [31:24]: ", bits(v, 31, 24), "Access Size")
		hl(w, " [23:16]: ", bits(v, 23, 16), "Total Size")
		if r := bits(v, 15, 6); r != 0 {
			hl(w, " [15:6] : ", r, "Reserved")
		}
		hl(w, "  [5:3] : ", bits(v, 5, 3), "Authentication Method")
		hl(w, "  [2:0] : ", bits(v, 2, 0), "Number of RPMB Units")
	case "hctma":
		v := fv
		if r := v >> 1; r != 0 {
			hl(w, " [15:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "Host Controlled Thermal Management %sSupported", notU(v&1))
	case "mntmt":
		tempLine(w, uint16(fv), "Minimum Thermal Management Temperature (MNTMT)")
		return
	case "mxtmt":
		tempLine(w, uint16(fv), "Maximum Thermal Management Temperature (MXTMT)")
		return
	case "sanicap":
		v := fv
		nodmmas := bits(v, 31, 30)
		hl(w, "  [31:30] : ", nodmmas, "%s", [...]string{
			"Additional media modification after sanitize operation completes successfully is not defined",
			"Media is not additionally modified after sanitize operation completes successfully",
			"Media is additionally modified after sanitize operation completes successfully",
			"Reserved"}[nodmmas])
		hl(w, "  [29:29] : ", bits(v, 29, 29), "No-Deallocate After Sanitize bit in Sanitize command %sSupported", pickU(bits(v, 29, 29), "Not ", ""))
		if r := bits(v, 28, 3); r != 0 {
			hl(w, "  [28:3] : ", r, "Reserved")
		}
		hl(w, "    [2:2] : ", bits(v, 2, 2), "Overwrite Sanitize Operation %sSupported", notU(bits(v, 2, 2)))
		hl(w, "    [1:1] : ", bits(v, 1, 1), "Block Erase Sanitize Operation %sSupported", notU(bits(v, 1, 1)))
		hl(w, "    [0:0] : ", bits(v, 0, 0), "Crypto Erase Sanitize Operation %sSupported", notU(bits(v, 0, 0)))
	case "anacap":
		v := fv
		hl(w, "  [7:7] : ", bits(v, 7, 7), "Non-zero group ID %sSupported", notU(bits(v, 7, 7)))
		hl(w, "  [6:6] : ", bits(v, 6, 6), "Group ID does %schange", pickU(bits(v, 6, 6), "not ", ""))
		if r := bits(v, 5, 5); r != 0 {
			hl(w, " [5:5] : ", r, "Reserved")
		}
		for _, f := range []struct {
			bit  uint
			text string
		}{{4, "ANA Change state"}, {3, "ANA Persistent Loss state"}, {2, "ANA Inaccessible state"}, {1, "ANA Non-optimized state"}, {0, "ANA Optimized state"}} {
			b := bits(v, f.bit, f.bit)
			hl(w, fmt.Sprintf("  [%d:%d] : ", f.bit, f.bit), b, "%s %sSupported", f.text, notU(b))
		}
	case "sqes", "cqes":
		v, q := fv, "SQ"
		if name == "cqes" {
			q = "CQ"
		}
		hl(w, "  [7:4] : ", v>>4, "Max %s Entry Size (%d)", q, 1<<(v>>4))
		hl(w, "  [3:0] : ", v&0xf, "Min %s Entry Size (%d)", q, 1<<(v&0xf))
	case "oncs":
		v := fv
		if r := bits(v, 15, 9); r != 0 {
			hl(w, " [15:9] : ", r, "Reserved")
		}
		for _, f := range []struct {
			bit  uint
			text string
		}{{8, "Copy"}, {7, "Verify"}, {6, "Timestamp"}, {5, "Reservations"}, {4, "Save and Select"}, {3, "Write Zeroes"},
			{2, "Data Set Management"}, {1, "Write Uncorrectable"}, {0, "Compare"}} {
			b := bits(v, f.bit, f.bit)
			hl(w, fmt.Sprintf("  [%d:%d] : ", f.bit, f.bit), b, "%s %sSupported", f.text, notU(b))
		}
	case "fuses":
		v := fv
		if r := bits(v, 7, 1); r != 0 { // nvme-cli masks 0xFE
			hl(w, " [15:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "Fused Compare and Write %sSupported", notU(v&1))
	case "fna":
		v := fv
		if r := v >> 4; r != 0 {
			hl(w, "  [7:4] : ", r, "Reserved")
		}
		hl(w, "  [3:3] : ", bits(v, 3, 3), "Format NVM Broadcast NSID (FFFFFFFFh) %sSupported", pickU(bits(v, 3, 3), "Not ", ""))
		hl(w, "  [2:2] : ", bits(v, 2, 2), "Crypto Erase %sSupported as part of Secure Erase", notU(bits(v, 2, 2)))
		hl(w, "  [1:1] : ", bits(v, 1, 1), "Crypto Erase Applies to %s Namespace(s)", pickU(bits(v, 1, 1), "All", "Single"))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "Format Applies to %s Namespace(s)", pickU(bits(v, 0, 0), "All", "Single"))
	case "vwc":
		v := fv
		if r := v >> 3; r != 0 {
			hl(w, "  [7:3] : ", r, "Reserved")
		}
		flush := bits(v, 2, 1)
		hl(w, "  [2:1] : ", flush, "%s", [...]string{"Support for the NSID field set to FFFFFFFFh is not indicated", "Reserved",
			"The Flush command does not support NSID set to FFFFFFFFh", "The Flush command supports NSID set to FFFFFFFFh"}[flush])
		hl(w, "  [0:0] : ", v&1, "Volatile Write Cache %sPresent", notU(v&1))
	case "nwpc":
		v := fv
		if r := v >> 3; r != 0 {
			hl(w, "  [7:3] : ", r, "Reserved")
		}
		hl(w, "  [2:2] : ", bits(v, 2, 2), "Permanent Write Protect %sSupported", notU(bits(v, 2, 2)))
		hl(w, "  [1:1] : ", bits(v, 1, 1), "Write Protect Until Power Supply %sSupported", notU(bits(v, 1, 1)))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "No Write Protect and Write Protect Namespace %sSupported", notU(bits(v, 0, 0)))
	case "ocfs":
		v := fv
		if r := v >> 2; r != 0 {
			hl(w, "  [15:2] : ", r, "Reserved")
		}
		hl(w, "  [1:1] : ", bits(v, 1, 1), "Controller Copy Format 1h %sSupported", notU(bits(v, 1, 1)))
		hl(w, "  [0:0] : ", bits(v, 0, 0), "Controller Copy Format 0h %sSupported", notU(bits(v, 0, 0)))
	case "sgls":
		v := fv
		sglsp := v & 3
		if r := v >> 22; r != 0 {
			hl(w, " [31:22]: ", r, "Reserved")
		}
		for _, f := range []struct {
			bit  uint
			text string
		}{{21, "Transport SGL Data Block Descriptor %sSupported"}, {20, "Address Offsets %sSupported"},
			{19, "Metadata Pointer Containing SGL Descriptor is %sSupported"}, {18, "SGL Length Larger than Buffer %sSupported"},
			{17, "Byte-Aligned Contig. MD Buffer %sSupported"}, {16, "SGL Bit-Bucket %sSupported"}} {
			if b := bits(v, f.bit, f.bit); sglsp != 0 || b != 0 {
				hl(w, fmt.Sprintf(" [%d:%d]: ", f.bit, f.bit), b, f.text, notU(b))
			}
		}
		hl(w, " [15:8] : ", bits(v, 15, 8), "SGL Descriptor Threshold")
		if r := bits(v, 7, 3); r != 0 {
			hl(w, " [7:3] : ", r, "Reserved")
		}
		if b := bits(v, 2, 2); sglsp != 0 || b != 0 {
			hl(w, "  [2:2] : ", b, "Keyed SGL Data Block descriptor %sSupported", notU(b))
		}
		switch sglsp {
		case 3:
			hl(w, "  [1:0] : ", sglsp, "Reserved")
		case 2:
			hl(w, "  [1:0] : ", sglsp, "Scatter-Gather Lists Supported. Dword alignment required.")
		case 1:
			hl(w, "  [1:0] : ", sglsp, "Scatter-Gather Lists Supported. No Dword alignment required.")
		default:
			hl(w, " [1:0]  : ", sglsp, "Scatter-Gather Lists Not Supported")
		}
	case "fcatt":
		v := fv
		if r := v >> 1; r != 0 {
			hl(w, "  [7:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "%s Controller Model", pickU(v&1, "Static", "Dynamic"))
	case "ofcs":
		v := fv
		if r := v >> 1; r != 0 {
			hl(w, "  [15:1] : ", r, "Reserved")
		}
		hl(w, "  [0:0] : ", v&1, "Disconnect command %s Supported", pickU(v&1, "", "Not"))
	default:
		return
	}
	fmt.Fprintln(w)
}
