package nvmecli

import (
	"fmt"
	"io"
)

// The fields of Identify Controller, Identify Namespace and the SMART /
// Health log, each described once: where it is, how wide, how it reads
// and how nvme-cli shows it. One walk of a table prints the normal output
// (with -H, each field's decoding after its line), another builds the
// JSON object, in the order of nvme-cli's json_nvme_id_ctrl,
// json_nvme_id_ns and json_smart_log.

// kind is how a field's bytes read.
type kind uint8

const (
	u8 kind = iota
	u16
	u32
	u64
	u128le // 16 bytes little endian, decimal in both outputs
	text   // fixed-size ASCII: the normal output prints it whole, JSON up to the first NUL
	nqn    // NUL-terminated: both up to the first NUL; JSON leaves it out when empty
	ieee   // a 3-byte OUI, least significant byte first: "%02x%02x%02x" most significant first, a number in JSON
	guid   // FGUID: "%x-%x-%x-%x-%x" of its 4, 2, 2, 2 and 6 bytes
	hexstr // bytes in "%x" (NGUID, EUI64)
)

// show is how the normal output prints an integer field.
type show uint8

const (
	dec       show = iota // %d
	chex                  // C's %#x
	percent               // %d%%
	kelvin                // %d°C (%d Kelvin): the field is in kelvins
	dataUnits             // the 128-bit count, then its bytes (units of 1000 × 512) in SI
)

// field is one field of a data structure.
type field struct {
	name  string // the JSON member; the normal output's label too, unless label is set
	label string // the normal output's label, printed as it is (nvme-cli aligns some with tabs)
	off   int
	size  int // of text, nqn and hexstr fields
	kind  kind
	show  show
	// when, if set, says whether the structure has the field (both outputs).
	when func(b []byte) bool
	// repeat > 0: the field stands repeat times, stride bytes apart, each
	// printed only when non-zero, its name and label formatted with its
	// number (1-based).
	repeat, stride int
}

// uint returns an integer field's value.
func (f *field) uint(b []byte) uint64 {
	switch f.kind {
	case u8:
		return uint64(b[f.off])
	case u16:
		return uint64(le16(b, f.off))
	case u32:
		return uint64(le32(b, f.off))
	case u64:
		return le64(b, f.off)
	case ieee:
		return uint64(b[f.off+2])<<16 | uint64(b[f.off+1])<<8 | uint64(b[f.off])
	}
	panic("nvmecli: " + f.name + " is not an integer field")
}

// raw returns the field's bytes.
func (f *field) raw(b []byte) []byte {
	switch f.kind {
	case u128le:
		return b[f.off : f.off+16]
	case guid:
		return b[f.off : f.off+16]
	case ieee:
		return b[f.off : f.off+3]
	}
	return b[f.off : f.off+f.size]
}

// normal is the field's value in the normal output.
func (f *field) normal(b []byte) string {
	switch f.kind {
	case u128le:
		if f.show == dataUnits {
			return fmt.Sprintf("%s (%s)", u128(f.raw(b)), siBytes(f.raw(b), 1000*512))
		}
		return u128(f.raw(b))
	case text:
		return string(f.raw(b))
	case nqn:
		return cstr(f.raw(b))
	case ieee:
		r := f.raw(b)
		return fmt.Sprintf("%02x%02x%02x", r[2], r[1], r[0])
	case guid:
		return fguid(f.raw(b))
	case hexstr:
		return fmt.Sprintf("%x", f.raw(b))
	}
	v := f.uint(b)
	switch f.show {
	case chex:
		return cx(v)
	case percent:
		return fmt.Sprintf("%d%%", v)
	case kelvin:
		return fmt.Sprintf("%d°C (%d Kelvin)", int(v)-273, v)
	}
	return fmt.Sprint(v)
}

// json is the field's JSON value, and whether the object has it.
func (f *field) json(b []byte) (any, bool) {
	switch f.kind {
	case u128le:
		return u128(f.raw(b)), true
	case text:
		return cstr(f.raw(b)), true
	case nqn:
		s := cstr(f.raw(b))
		return s, s != ""
	case guid:
		return fguid(f.raw(b)), true
	case hexstr:
		return fmt.Sprintf("%x", f.raw(b)), true
	}
	return f.uint(b), true
}

// layout is the table of one structure.
type layout struct {
	// width is the normal output's label column ("%-*s: ").
	width  int
	fields []field
	// jsonOrder, where nvme-cli's JSON lists the fields in another order
	// than its normal output, is the JSON's.
	jsonOrder []string
	// human prints a field's -H decoding after its normal line (nothing
	// for a field without one).
	human func(w io.Writer, f *field, b []byte)
	// jsonHuman, with -H, replaces a field's JSON value (nil: none does).
	jsonHuman func(f *field, b []byte) (any, bool)
}

// each calls fn for every field the structure has (a repeated field once
// per non-zero instance, as a plain field of its own).
func (l *layout) each(b []byte, fn func(f *field)) {
	for i := range l.fields {
		f := &l.fields[i]
		if f.when != nil && !f.when(b) {
			continue
		}
		if f.repeat == 0 {
			fn(f)
			continue
		}
		for n := 0; n < f.repeat; n++ {
			g := *f
			g.repeat, g.off = 0, f.off+n*f.stride
			if g.uint(b) == 0 {
				continue
			}
			g.name, g.label = fmt.Sprintf(f.name, n+1), fmt.Sprintf(f.label, n+1)
			fn(&g)
		}
	}
}

// printNormal writes the normal output's line of each field, with -H the
// decoding after it.
func (l *layout) printNormal(w io.Writer, b []byte, human bool) {
	l.each(b, func(f *field) {
		if f.label != "" {
			fmt.Fprintf(w, "%s: %s\n", f.label, f.normal(b))
		} else {
			fmt.Fprintf(w, "%-*s: %s\n", l.width, f.name, f.normal(b))
		}
		if human && l.human != nil {
			l.human(w, f, b)
		}
	})
}

// addJSON adds each field to o, in the JSON's order.
func (l *layout) addJSON(o *Object, b []byte, human bool) {
	byName := map[string]*field{}
	var order []string
	l.each(b, func(f *field) {
		g := *f
		byName[g.name] = &g
		order = append(order, g.name)
	})
	if l.jsonOrder != nil {
		order = l.jsonOrder
	}
	for _, name := range order {
		f := byName[name]
		if f == nil { // a field the structure does not have (when)
			continue
		}
		v, ok := f.json(b)
		if human && l.jsonHuman != nil {
			if hv, hok := l.jsonHuman(f, b); hok {
				v, ok = hv, true
			}
		}
		if ok {
			o.Add(f.name, v)
		}
	}
}

// idCtrl is Identify Controller (NVMe Base 2.0 §5.17.2.1, Figure 275), as
// nvme-cli 2.3 prints it.
var idCtrl = layout{
	width: 10,
	human: func(w io.Writer, f *field, b []byte) { showIDCtrlHuman(w, f, b) },
	fields: []field{
		{name: "vid", off: 0, kind: u16, show: chex},
		{name: "ssvid", off: 2, kind: u16, show: chex},
		{name: "sn", off: 4, size: 20, kind: text},
		{name: "mn", off: 24, size: 40, kind: text},
		{name: "fr", off: 64, size: 8, kind: text},
		{name: "rab", off: 72, kind: u8},
		{name: "ieee", off: 73, kind: ieee},
		{name: "cmic", off: 76, kind: u8, show: chex},
		{name: "mdts", off: 77, kind: u8},
		{name: "cntlid", off: 78, kind: u16, show: chex},
		{name: "ver", off: 80, kind: u32, show: chex},
		{name: "rtd3r", off: 84, kind: u32, show: chex},
		{name: "rtd3e", off: 88, kind: u32, show: chex},
		{name: "oaes", off: 92, kind: u32, show: chex},
		{name: "ctratt", off: 96, kind: u32, show: chex},
		{name: "rrls", off: 100, kind: u16, show: chex},
		{name: "cntrltype", off: 111, kind: u8},
		{name: "fguid", off: 112, kind: guid},
		{name: "crdt1", off: 128, kind: u16},
		{name: "crdt2", off: 130, kind: u16},
		{name: "crdt3", off: 132, kind: u16},
		{name: "nvmsr", off: 253, kind: u8},
		{name: "vwci", off: 254, kind: u8},
		{name: "mec", off: 255, kind: u8},
		{name: "oacs", off: 256, kind: u16, show: chex},
		{name: "acl", off: 258, kind: u8},
		{name: "aerl", off: 259, kind: u8},
		{name: "frmw", off: 260, kind: u8, show: chex},
		{name: "lpa", off: 261, kind: u8, show: chex},
		{name: "elpe", off: 262, kind: u8},
		{name: "npss", off: 263, kind: u8},
		{name: "avscc", off: 264, kind: u8, show: chex},
		{name: "apsta", off: 265, kind: u8, show: chex},
		{name: "wctemp", off: 266, kind: u16},
		{name: "cctemp", off: 268, kind: u16},
		{name: "mtfa", off: 270, kind: u16},
		{name: "hmpre", off: 272, kind: u32},
		{name: "hmmin", off: 276, kind: u32},
		{name: "tnvmcap", off: 280, kind: u128le},
		{name: "unvmcap", off: 296, kind: u128le},
		{name: "rpmbs", off: 312, kind: u32, show: chex},
		{name: "edstt", off: 316, kind: u16},
		{name: "dsto", off: 318, kind: u8},
		{name: "fwug", off: 319, kind: u8},
		{name: "kas", off: 320, kind: u16},
		{name: "hctma", off: 322, kind: u16, show: chex},
		{name: "mntmt", off: 324, kind: u16},
		{name: "mxtmt", off: 326, kind: u16},
		{name: "sanicap", off: 328, kind: u32, show: chex},
		{name: "hmminds", off: 332, kind: u32},
		{name: "hmmaxd", off: 336, kind: u16},
		{name: "nsetidmax", off: 338, kind: u16},
		{name: "endgidmax", off: 340, kind: u16},
		{name: "anatt", off: 342, kind: u8},
		{name: "anacap", off: 343, kind: u8},
		{name: "anagrpmax", off: 344, kind: u32},
		{name: "nanagrpid", off: 348, kind: u32},
		{name: "pels", off: 352, kind: u32},
		{name: "domainid", off: 356, kind: u16},
		{name: "megcap", off: 368, kind: u128le},
		{name: "sqes", off: 512, kind: u8, show: chex},
		{name: "cqes", off: 513, kind: u8, show: chex},
		{name: "maxcmd", off: 514, kind: u16},
		{name: "nn", off: 516, kind: u32},
		{name: "oncs", off: 520, kind: u16, show: chex},
		{name: "fuses", off: 522, kind: u16, show: chex},
		{name: "fna", off: 524, kind: u8, show: chex},
		{name: "vwc", off: 525, kind: u8, show: chex},
		{name: "awun", off: 526, kind: u16},
		{name: "awupf", off: 528, kind: u16},
		{name: "icsvscc", off: 530, kind: u8},
		{name: "nwpc", off: 531, kind: u8},
		{name: "acwu", off: 532, kind: u16},
		{name: "ocfs", off: 534, kind: u16, show: chex},
		{name: "sgls", off: 536, kind: u32, show: chex},
		{name: "mnan", off: 540, kind: u32},
		{name: "maxdna", off: 544, kind: u128le},
		{name: "maxcna", off: 560, kind: u32},
		{name: "subnqn", off: 768, size: 256, kind: nqn},
		{name: "ioccsz", off: 1792, kind: u32},
		{name: "iorcsz", off: 1796, kind: u32},
		{name: "icdoff", off: 1800, kind: u16},
		{name: "fcatt", off: 1802, kind: u8, show: chex},
		{name: "msdbd", off: 1803, kind: u8},
		{name: "ofcs", off: 1804, kind: u16},
	},
}

// npwgPresent: NSFEAT bit 4 says NPWG, NPWA, NPDG, NPDA and NOWS are
// defined.
func npwgPresent(b []byte) bool { return b[24]&0x10 != 0 }

// idNS is Identify Namespace of the NVM command set (NVM Command Set
// 1.0 §4.1.5.1, Figure 97), as nvme-cli 2.3 prints it.
var idNS = layout{
	width: 8,
	human: func(w io.Writer, f *field, b []byte) {
		if show := idNSHuman[f.name]; show != nil {
			show(w, b[f.off])
		}
	},
	fields: []field{
		{name: "nsze", off: 0, kind: u64, show: chex},
		{name: "ncap", off: 8, kind: u64, show: chex},
		{name: "nuse", off: 16, kind: u64, show: chex},
		{name: "nsfeat", off: 24, kind: u8, show: chex},
		{name: "nlbaf", off: 25, kind: u8},
		{name: "flbas", off: 26, kind: u8, show: chex},
		{name: "mc", off: 27, kind: u8, show: chex},
		{name: "dpc", off: 28, kind: u8, show: chex},
		{name: "dps", off: 29, kind: u8, show: chex},
		{name: "nmic", off: 30, kind: u8, show: chex},
		{name: "rescap", off: 31, kind: u8, show: chex},
		{name: "fpi", off: 32, kind: u8, show: chex},
		{name: "dlfeat", off: 33, kind: u8},
		{name: "nawun", off: 34, kind: u16},
		{name: "nawupf", off: 36, kind: u16},
		{name: "nacwu", off: 38, kind: u16},
		{name: "nabsn", off: 40, kind: u16},
		{name: "nabo", off: 42, kind: u16},
		{name: "nabspf", off: 44, kind: u16},
		{name: "noiob", off: 46, kind: u16},
		{name: "nvmcap", off: 48, kind: u128le},
		{name: "npwg", off: 64, kind: u16, when: npwgPresent},
		{name: "npwa", off: 66, kind: u16, when: npwgPresent},
		{name: "npdg", off: 68, kind: u16, when: npwgPresent},
		{name: "npda", off: 70, kind: u16, when: npwgPresent},
		{name: "nows", off: 72, kind: u16, when: npwgPresent},
		{name: "mssrl", off: 74, kind: u16},
		{name: "mcl", off: 76, kind: u32},
		{name: "msrc", off: 80, kind: u8},
		{name: "nulbaf", off: 84, kind: u8},
		{name: "anagrpid", off: 92, kind: u32},
		{name: "nsattr", label: "nsattr\t", off: 99, kind: u8},
		{name: "nvmsetid", off: 100, kind: u16},
		{name: "endgid", off: 102, kind: u16},
		{name: "nguid", off: 104, size: 16, kind: hexstr},
		{name: "eui64", off: 120, size: 8, kind: hexstr},
	},
	// json_nvme_id_ns lists NSATTR and NVMSETID before the optional
	// performance fields and EUI64 before NGUID.
	jsonOrder: []string{"nsze", "ncap", "nuse", "nsfeat", "nlbaf", "flbas", "mc", "dpc", "dps", "nmic", "rescap",
		"fpi", "dlfeat", "nawun", "nawupf", "nacwu", "nabsn", "nabo", "nabspf", "noiob", "nvmcap", "nsattr",
		"nvmsetid", "npwg", "npwa", "npdg", "npda", "nows", "mssrl", "mcl", "msrc", "nulbaf", "anagrpid", "endgid",
		"eui64", "nguid"},
}

// idNSHuman are the -H decodings of id-ns (nvme_show_id_ns_<name>).
var idNSHuman = map[string]func(io.Writer, uint8){
	"nsfeat": showNSFeat, "flbas": showFLBAS, "mc": showMC, "dpc": showDPC, "dps": showDPS,
	"nmic": showNMIC, "rescap": showRescap, "fpi": showFPI, "dlfeat": showDLFeat,
}

// smart is the SMART / Health Information log page (NVMe Base 2.0
// §5.16.1.3, Figure 207), as nvme-cli 2.3's nvme_show_smart_log and
// json_smart_log print it.
var smart = layout{
	human: func(w io.Writer, f *field, b []byte) {
		if f.name != "critical_warning" {
			return
		}
		cw := b[f.off]
		fmt.Fprintf(w, "      Available Spare[0]             : %d\n", cw&1)
		fmt.Fprintf(w, "      Temp. Threshold[1]             : %d\n", cw>>1&1)
		fmt.Fprintf(w, "      NVM subsystem Reliability[2]   : %d\n", cw>>2&1)
		fmt.Fprintf(w, "      Read-only[3]                   : %d\n", cw>>3&1)
		fmt.Fprintf(w, "      Volatile mem. backup failed[4] : %d\n", cw>>4&1)
		fmt.Fprintf(w, "      Persistent Mem. RO[5]          : %d\n", cw>>5&1)
	},
	jsonHuman: func(f *field, b []byte) (any, bool) {
		if f.name != "critical_warning" {
			return nil, false
		}
		cw := f.uint(b)
		return (&Object{}).Add("value", cw).Add("available_spare", cw&1).
			Add("temp_threshold", cw>>1&1).Add("reliability_degraded", cw>>2&1).Add("ro", cw>>3&1).
			Add("vmbu_failed", cw>>4&1).Add("pmr_ro", cw>>5&1), true
	},
	fields: []field{
		{name: "critical_warning", label: "critical_warning\t\t\t", off: 0, kind: u8, show: chex},
		{name: "temperature", label: "temperature\t\t\t\t", off: 1, kind: u16, show: kelvin},
		{name: "avail_spare", label: "available_spare\t\t\t\t", off: 3, kind: u8, show: percent},
		{name: "spare_thresh", label: "available_spare_threshold\t\t", off: 4, kind: u8, show: percent},
		{name: "percent_used", label: "percentage_used\t\t\t\t", off: 5, kind: u8, show: percent},
		{name: "endurance_grp_critical_warning_summary", label: "endurance group critical warning summary", off: 6, kind: u8, show: chex},
		{name: "data_units_read", label: "Data Units Read\t\t\t\t", off: 32, kind: u128le, show: dataUnits},
		{name: "data_units_written", label: "Data Units Written\t\t\t", off: 48, kind: u128le, show: dataUnits},
		{name: "host_read_commands", label: "host_read_commands\t\t\t", off: 64, kind: u128le},
		{name: "host_write_commands", label: "host_write_commands\t\t\t", off: 80, kind: u128le},
		{name: "controller_busy_time", label: "controller_busy_time\t\t\t", off: 96, kind: u128le},
		{name: "power_cycles", label: "power_cycles\t\t\t\t", off: 112, kind: u128le},
		{name: "power_on_hours", label: "power_on_hours\t\t\t\t", off: 128, kind: u128le},
		{name: "unsafe_shutdowns", label: "unsafe_shutdowns\t\t\t", off: 144, kind: u128le},
		{name: "media_errors", label: "media_errors\t\t\t\t", off: 160, kind: u128le},
		{name: "num_err_log_entries", label: "num_err_log_entries\t\t\t", off: 176, kind: u128le},
		{name: "warning_temp_time", label: "Warning Temperature Time\t\t", off: 192, kind: u32},
		{name: "critical_comp_time", label: "Critical Composite Temperature Time\t", off: 196, kind: u32},
		{name: "temperature_sensor_%d", label: "Temperature Sensor %d           ", off: 200, kind: u16, show: kelvin, repeat: 8, stride: 2},
		{name: "thm_temp1_trans_count", label: "Thermal Management T1 Trans Count\t", off: 216, kind: u32},
		{name: "thm_temp2_trans_count", label: "Thermal Management T2 Trans Count\t", off: 220, kind: u32},
		{name: "thm_temp1_total_time", label: "Thermal Management T1 Total Time\t", off: 224, kind: u32},
		{name: "thm_temp2_total_time", label: "Thermal Management T2 Total Time\t", off: 228, kind: u32},
	},
}
