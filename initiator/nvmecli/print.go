package nvmecli

import (
	"fmt"
	"io"
	"math/big"

	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The layouts below are nvme-cli 2.x's (nvme-print.c: json_nvme_id_ctrl,
// json_nvme_id_ns, json_smart_log, json_error_log, json_fw_log,
// json_effects_log, json_ana_log and their normal counterparts), field
// for field.

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

func IDCtrlJSON(c *nvmeof.IdentifyController) *Object {
	b := c[:]
	u8 := func(o int) uint64 { return uint64(b[o]) }
	u16 := func(o int) uint64 { return uint64(le16(b, o)) }
	u32 := func(o int) uint64 { return uint64(le32(b, o)) }
	o := &Object{}
	o.Add("vid", u16(0)).Add("ssvid", u16(2)).
		Add("sn", cstr(b[4:24])).Add("mn", cstr(b[24:64])).Add("fr", cstr(b[64:72])).
		Add("rab", u8(72)).Add("ieee", uint64(b[75])<<16|uint64(b[74])<<8|uint64(b[73])).
		Add("cmic", u8(76)).Add("mdts", u8(77)).Add("cntlid", u16(78)).Add("ver", u32(80)).
		Add("rtd3r", u32(84)).Add("rtd3e", u32(88)).Add("oaes", u32(92)).Add("ctratt", u32(96)).
		Add("rrls", u16(100)).Add("cntrltype", u8(111)).Add("fguid", fguid(b[112:128])).
		Add("crdt1", u16(128)).Add("crdt2", u16(130)).Add("crdt3", u16(132)).
		Add("nvmsr", u8(253)).Add("vwci", u8(254)).Add("mec", u8(255)).
		Add("oacs", u16(256)).Add("acl", u8(258)).Add("aerl", u8(259)).Add("frmw", u8(260)).
		Add("lpa", u8(261)).Add("elpe", u8(262)).Add("npss", u8(263)).Add("avscc", u8(264)).
		Add("apsta", u8(265)).Add("wctemp", u16(266)).Add("cctemp", u16(268)).Add("mtfa", u16(270)).
		Add("hmpre", u32(272)).Add("hmmin", u32(276)).Add("tnvmcap", u128(b[280:])).
		Add("unvmcap", u128(b[296:])).Add("rpmbs", u32(312)).Add("edstt", u16(316)).
		Add("dsto", u8(318)).Add("fwug", u8(319)).Add("kas", u16(320)).Add("hctma", u16(322)).
		Add("mntmt", u16(324)).Add("mxtmt", u16(326)).Add("sanicap", u32(328)).
		Add("hmminds", u32(332)).Add("hmmaxd", u16(336)).Add("nsetidmax", u16(338)).
		Add("endgidmax", u16(340)).Add("anatt", u8(342)).Add("anacap", u8(343)).
		Add("anagrpmax", u32(344)).Add("nanagrpid", u32(348)).Add("pels", u32(352)).
		Add("domainid", u16(356)).Add("megcap", u128(b[368:])).Add("sqes", u8(512)).Add("cqes", u8(513)).
		Add("maxcmd", u16(514)).Add("nn", u32(516)).Add("oncs", u16(520)).Add("fuses", u16(522)).
		Add("fna", u8(524)).Add("vwc", u8(525)).Add("awun", u16(526)).Add("awupf", u16(528)).
		Add("icsvscc", u8(530)).Add("nwpc", u8(531)).Add("acwu", u16(532)).Add("ocfs", u16(534)).
		Add("sgls", u32(536)).Add("mnan", u32(540)).Add("maxdna", u128(b[544:])).Add("maxcna", u32(560))
	if s := cstr(b[768:1024]); s != "" {
		o.Add("subnqn", s)
	}
	o.Add("ioccsz", u32(1792)).Add("iorcsz", u32(1796)).Add("icdoff", u16(1800)).
		Add("fcatt", u8(1802)).Add("msdbd", u8(1803)).Add("ofcs", u16(1804))
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
	p := func(name, v string) {
		fmt.Fprintf(w, "%-10s: %s\n", name, v)
		if human {
			showIDCtrlHuman(w, name, b)
		}
	}
	d := func(v uint64) string { return fmt.Sprint(v) }
	u16 := func(o int) uint64 { return uint64(le16(b, o)) }
	u32 := func(o int) uint64 { return uint64(le32(b, o)) }
	u8 := func(o int) uint64 { return uint64(b[o]) }
	fmt.Fprintln(w, "NVME Identify Controller:")
	p("vid", cx(u16(0)))
	p("ssvid", cx(u16(2)))
	p("sn", string(b[4:24]))
	p("mn", string(b[24:64]))
	p("fr", string(b[64:72]))
	p("rab", d(u8(72)))
	p("ieee", fmt.Sprintf("%02x%02x%02x", b[75], b[74], b[73]))
	p("cmic", cx(u8(76)))
	p("mdts", d(u8(77)))
	p("cntlid", cx(u16(78)))
	p("ver", cx(u32(80)))
	p("rtd3r", cx(u32(84)))
	p("rtd3e", cx(u32(88)))
	p("oaes", cx(u32(92)))
	p("ctratt", cx(u32(96)))
	p("rrls", cx(u16(100)))
	p("cntrltype", d(u8(111)))
	p("fguid", fguid(b[112:128]))
	p("crdt1", d(u16(128)))
	p("crdt2", d(u16(130)))
	p("crdt3", d(u16(132)))
	p("nvmsr", d(u8(253)))
	p("vwci", d(u8(254)))
	p("mec", d(u8(255)))
	p("oacs", cx(u16(256)))
	p("acl", d(u8(258)))
	p("aerl", d(u8(259)))
	p("frmw", cx(u8(260)))
	p("lpa", cx(u8(261)))
	p("elpe", d(u8(262)))
	p("npss", d(u8(263)))
	p("avscc", cx(u8(264)))
	p("apsta", cx(u8(265)))
	p("wctemp", d(u16(266)))
	p("cctemp", d(u16(268)))
	p("mtfa", d(u16(270)))
	p("hmpre", d(u32(272)))
	p("hmmin", d(u32(276)))
	p("tnvmcap", u128String(b[280:296]))
	p("unvmcap", u128String(b[296:312]))
	p("rpmbs", cx(u32(312)))
	p("edstt", d(u16(316)))
	p("dsto", d(u8(318)))
	p("fwug", d(u8(319)))
	p("kas", d(u16(320)))
	p("hctma", cx(u16(322)))
	p("mntmt", d(u16(324)))
	p("mxtmt", d(u16(326)))
	p("sanicap", cx(u32(328)))
	p("hmminds", d(u32(332)))
	p("hmmaxd", d(u16(336)))
	p("nsetidmax", d(u16(338)))
	p("endgidmax", d(u16(340)))
	p("anatt", d(u8(342)))
	p("anacap", d(u8(343)))
	p("anagrpmax", d(u32(344)))
	p("nanagrpid", d(u32(348)))
	p("pels", d(u32(352)))
	p("domainid", d(u16(356)))
	p("megcap", u128String(b[368:384]))
	p("sqes", cx(u8(512)))
	p("cqes", cx(u8(513)))
	p("maxcmd", d(u16(514)))
	p("nn", d(u32(516)))
	p("oncs", cx(u16(520)))
	p("fuses", cx(u16(522)))
	p("fna", cx(u8(524)))
	p("vwc", cx(u8(525)))
	p("awun", d(u16(526)))
	p("awupf", d(u16(528)))
	p("icsvscc", d(u8(530)))
	p("nwpc", d(u8(531)))
	p("acwu", d(u16(532)))
	p("ocfs", cx(u16(534)))
	p("sgls", cx(u32(536)))
	p("mnan", d(u32(540)))
	p("maxdna", u128String(b[544:560]))
	p("maxcna", d(u32(560)))
	p("subnqn", cstr(b[768:1024]))
	p("ioccsz", d(u32(1792)))
	p("iorcsz", d(u32(1796)))
	p("icdoff", d(u16(1800)))
	p("fcatt", cx(u8(1802)))
	p("msdbd", d(u8(1803)))
	p("ofcs", d(u16(1804)))
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

// u128String prints a 128-bit little-endian counter in decimal.
func u128String(b []byte) string { return u128(b) }

func IDNSJSON(n *nvmeof.IdentifyNamespace) *Object {
	b := n[:]
	u8 := func(o int) uint64 { return uint64(b[o]) }
	u16 := func(o int) uint64 { return uint64(le16(b, o)) }
	u32 := func(o int) uint64 { return uint64(le32(b, o)) }
	o := &Object{}
	o.Add("nsze", le64(b, 0)).Add("ncap", le64(b, 8)).Add("nuse", le64(b, 16)).
		Add("nsfeat", u8(24)).Add("nlbaf", u8(25)).Add("flbas", u8(26)).Add("mc", u8(27)).
		Add("dpc", u8(28)).Add("dps", u8(29)).Add("nmic", u8(30)).Add("rescap", u8(31)).
		Add("fpi", u8(32)).Add("dlfeat", u8(33)).Add("nawun", u16(34)).Add("nawupf", u16(36)).
		Add("nacwu", u16(38)).Add("nabsn", u16(40)).Add("nabo", u16(42)).Add("nabspf", u16(44)).
		Add("noiob", u16(46)).Add("nvmcap", u128(b[48:])).Add("nsattr", u8(99)).Add("nvmsetid", u16(100))
	if b[24]&0x10 != 0 {
		o.Add("npwg", u16(64)).Add("npwa", u16(66)).Add("npdg", u16(68)).Add("npda", u16(70)).Add("nows", u16(72))
	}
	o.Add("mssrl", u16(74)).Add("mcl", u32(76)).Add("msrc", u8(80)).Add("nulbaf", u8(84)).
		Add("anagrpid", u32(92)).Add("endgid", u16(102)).
		Add("eui64", fmt.Sprintf("%x", b[120:128])).Add("nguid", fmt.Sprintf("%x", b[104:120]))
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
	p := func(name, v string) { fmt.Fprintf(w, "%-8s: %s\n", name, v) }
	d := func(v uint64) string { return fmt.Sprint(v) }
	u16 := func(o int) uint64 { return uint64(le16(b, o)) }
	u32 := func(o int) uint64 { return uint64(le32(b, o)) }
	u8 := func(o int) uint64 { return uint64(b[o]) }
	fmt.Fprintf(w, "NVME Identify Namespace %d:\n", nsid)
	p("nsze", cx(le64(b, 0)))
	p("ncap", cx(le64(b, 8)))
	p("nuse", cx(le64(b, 16)))
	// with prints a field's -H decoding after its line.
	with := func(show func(io.Writer, uint8), v uint8) {
		if human {
			show(w, v)
		}
	}
	p("nsfeat", cx(u8(24)))
	with(showNSFeat, b[24])
	p("nlbaf", d(u8(25)))
	p("flbas", cx(u8(26)))
	with(showFLBAS, b[26])
	p("mc", cx(u8(27)))
	with(showMC, b[27])
	p("dpc", cx(u8(28)))
	with(showDPC, b[28])
	p("dps", cx(u8(29)))
	with(showDPS, b[29])
	p("nmic", cx(u8(30)))
	with(showNMIC, b[30])
	p("rescap", cx(u8(31)))
	with(showRescap, b[31])
	p("fpi", cx(u8(32)))
	with(showFPI, b[32])
	p("dlfeat", d(u8(33)))
	with(showDLFeat, b[33])
	p("nawun", d(u16(34)))
	p("nawupf", d(u16(36)))
	p("nacwu", d(u16(38)))
	p("nabsn", d(u16(40)))
	p("nabo", d(u16(42)))
	p("nabspf", d(u16(44)))
	p("noiob", d(u16(46)))
	p("nvmcap", u128String(b[48:64]))
	if b[24]&0x10 != 0 {
		p("npwg", d(u16(64)))
		p("npwa", d(u16(66)))
		p("npdg", d(u16(68)))
		p("npda", d(u16(70)))
		p("nows", d(u16(72)))
	}
	p("mssrl", d(u16(74)))
	p("mcl", d(u32(76)))
	p("msrc", d(u8(80)))
	p("nulbaf", d(u8(84)))
	p("anagrpid", d(u32(92)))
	fmt.Fprintf(w, "nsattr\t: %d\n", b[99])
	p("nvmsetid", d(u16(100)))
	p("endgid", d(u16(102)))
	p("nguid", fmt.Sprintf("%x", b[104:120]))
	p("eui64", fmt.Sprintf("%x", b[120:128]))
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

func SMARTJSON(l *nvmeof.SMARTLog, human bool) *Object {
	b := l[:]
	o := &Object{}
	if human {
		cw := uint64(b[0])
		o.Add("critical_warning", (&Object{}).Add("value", cw).Add("available_spare", cw&1).
			Add("temp_threshold", cw>>1&1).Add("reliability_degraded", cw>>2&1).Add("ro", cw>>3&1).
			Add("vmbu_failed", cw>>4&1).Add("pmr_ro", cw>>5&1))
	} else {
		o.Add("critical_warning", uint64(b[0]))
	}
	o.Add("temperature", uint64(le16(b, 1))).Add("avail_spare", uint64(b[3])).
		Add("spare_thresh", uint64(b[4])).Add("percent_used", uint64(b[5])).
		Add("endurance_grp_critical_warning_summary", uint64(b[6])).
		Add("data_units_read", u128(b[32:])).Add("data_units_written", u128(b[48:])).
		Add("host_read_commands", u128(b[64:])).Add("host_write_commands", u128(b[80:])).
		Add("controller_busy_time", u128(b[96:])).Add("power_cycles", u128(b[112:])).
		Add("power_on_hours", u128(b[128:])).Add("unsafe_shutdowns", u128(b[144:])).
		Add("media_errors", u128(b[160:])).Add("num_err_log_entries", u128(b[176:])).
		Add("warning_temp_time", uint64(le32(b, 192))).Add("critical_comp_time", uint64(le32(b, 196)))
	for c := 0; c < 8; c++ {
		if t := le16(b, 200+2*c); t != 0 {
			o.Add(fmt.Sprintf("temperature_sensor_%d", c+1), uint64(t))
		}
	}
	o.Add("thm_temp1_trans_count", uint64(le32(b, 216))).Add("thm_temp2_trans_count", uint64(le32(b, 220))).
		Add("thm_temp1_total_time", uint64(le32(b, 224))).Add("thm_temp2_total_time", uint64(le32(b, 228)))
	return o
}

// PrintSMART is nvme-cli 2.3's normal smart-log output
// (nvme_show_smart_log); human (-H) decodes the critical warning.
func PrintSMART(w io.Writer, l *nvmeof.SMARTLog, dev string, nsid uint32, human bool) {
	b := l[:]
	temp := le16(b, 1)
	cw := b[0]
	fmt.Fprintf(w, "Smart Log for NVME device:%s namespace-id:%x\n", dev, nsid)
	fmt.Fprintf(w, "critical_warning\t\t\t: %s\n", cx(uint64(cw)))
	if human {
		fmt.Fprintf(w, "      Available Spare[0]             : %d\n", cw&1)
		fmt.Fprintf(w, "      Temp. Threshold[1]             : %d\n", cw>>1&1)
		fmt.Fprintf(w, "      NVM subsystem Reliability[2]   : %d\n", cw>>2&1)
		fmt.Fprintf(w, "      Read-only[3]                   : %d\n", cw>>3&1)
		fmt.Fprintf(w, "      Volatile mem. backup failed[4] : %d\n", cw>>4&1)
		fmt.Fprintf(w, "      Persistent Mem. RO[5]          : %d\n", cw>>5&1)
	}
	fmt.Fprintf(w, "temperature\t\t\t\t: %d°C (%d Kelvin)\n", int(temp)-273, temp)
	fmt.Fprintf(w, "available_spare\t\t\t\t: %d%%\n", b[3])
	fmt.Fprintf(w, "available_spare_threshold\t\t: %d%%\n", b[4])
	fmt.Fprintf(w, "percentage_used\t\t\t\t: %d%%\n", b[5])
	fmt.Fprintf(w, "endurance group critical warning summary: %s\n", cx(uint64(b[6])))
	fmt.Fprintf(w, "Data Units Read\t\t\t\t: %s (%s)\n", u128(b[32:48]), siBytes(b[32:48], 1000*512))
	fmt.Fprintf(w, "Data Units Written\t\t\t: %s (%s)\n", u128(b[48:64]), siBytes(b[48:64], 1000*512))
	for _, f := range []struct {
		name string
		off  int
	}{{"host_read_commands\t\t\t", 64}, {"host_write_commands\t\t\t", 80}, {"controller_busy_time\t\t\t", 96},
		{"power_cycles\t\t\t\t", 112}, {"power_on_hours\t\t\t\t", 128}, {"unsafe_shutdowns\t\t\t", 144},
		{"media_errors\t\t\t\t", 160}, {"num_err_log_entries\t\t\t", 176}} {
		fmt.Fprintf(w, "%s: %s\n", f.name, u128(b[f.off:f.off+16]))
	}
	fmt.Fprintf(w, "Warning Temperature Time\t\t: %d\n", le32(b, 192))
	fmt.Fprintf(w, "Critical Composite Temperature Time\t: %d\n", le32(b, 196))
	for c := 0; c < 8; c++ {
		if t := le16(b, 200+2*c); t != 0 {
			fmt.Fprintf(w, "Temperature Sensor %d           : %d°C (%d Kelvin)\n", c+1, int(t)-273, t)
		}
	}
	fmt.Fprintf(w, "Thermal Management T1 Trans Count\t: %d\n", le32(b, 216))
	fmt.Fprintf(w, "Thermal Management T2 Trans Count\t: %d\n", le32(b, 220))
	fmt.Fprintf(w, "Thermal Management T1 Total Time\t: %d\n", le32(b, 224))
	fmt.Fprintf(w, "Thermal Management T2 Total Time\t: %d\n", le32(b, 228))
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
