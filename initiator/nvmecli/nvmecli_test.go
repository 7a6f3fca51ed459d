package nvmecli

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestAdminJSONGolden prints logs built with the values of a controller
// whose nvme-cli 2.3 output (Linux 6.1 guest, kernel-connected to nvmetd)
// is in testdata, and wants the same text byte for byte (JSON, and
// smart-log's normal output with and without -H).
func TestAdminJSONGolden(t *testing.T) {
	var smart nvmeof.SMARTLog
	smart[3] = 100
	smart[32] = 1  // data units read
	smart[64] = 6  // host read commands
	smart[112] = 1 // power cycles
	want, err := os.ReadFile("testdata/smart-log.nvme-cli-2.3.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := SMARTJSON(&smart, false).String() + "\n"; got != string(want) {
		t.Errorf("smart-log json:\n%s\nwant:\n%s", got, want)
	}
	for _, g := range []struct {
		file  string
		human bool
	}{{"smart-log.nvme-cli-2.3.txt", false}, {"smart-log-H.nvme-cli-2.3.txt", true}} {
		want, err := os.ReadFile("testdata/" + g.file)
		if err != nil {
			t.Fatal(err)
		}
		var w strings.Builder
		PrintSMART(&w, &smart, "nvme0", 0xffffffff, g.human)
		if w.String() != string(want) {
			t.Errorf("%s:\n%q\nwant:\n%q", g.file, w.String(), want)
		}
	}

	var ns nvmeof.IdentifyNamespace
	b := ns[:]
	binary.LittleEndian.PutUint64(b[0:], 131072)
	binary.LittleEndian.PutUint64(b[8:], 131072)
	binary.LittleEndian.PutUint64(b[16:], 131072)
	b[24], b[30], b[33] = 17, 1, 9
	for _, off := range []int{64, 66, 68, 70, 72} {
		binary.LittleEndian.PutUint16(b[off:], 7)
	}
	binary.LittleEndian.PutUint32(b[92:], 1)
	nguid, _ := hex.DecodeString("93ac3b7437179f99b0bb94a90a6362c5")
	eui, _ := hex.DecodeString("864c08d69b42af07")
	copy(b[104:], nguid)
	copy(b[120:], eui)
	b[130] = 9 // LBAF0: 512-byte blocks
	want, err = os.ReadFile("testdata/id-ns.nvme-cli-2.3.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := IDNSJSON(&ns).String() + "\n"; got != string(want) {
		t.Errorf("id-ns json:\n%s\nwant:\n%s", got, want)
	}
}

// TestHexDump is nvme-cli's d() layout.
func TestHexDump(t *testing.T) {
	var w bytes.Buffer
	HexDump(&w, []byte("0123456789abcdefXY"))
	want := "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f\n" +
		"0000: 30 31 32 33 34 35 36 37 38 39 61 62 63 64 65 66 \"0123456789abcdef\"\n" +
		"0010: 58 59" + strings.Repeat(" ", 44) + "\"XY\"\n" // nvme-cli: " %*s " with 2*b+b/group = 42
	if w.String() != want {
		t.Errorf("HexDump:\n%q\nwant:\n%q", w.String(), want)
	}
}

// FuzzAdminPrint: whatever a controller returns, the printers neither
// panic nor loop.
func FuzzAdminPrint(f *testing.F) {
	f.Add(make([]byte, 4096))
	f.Add(bytes.Repeat([]byte{0xff}, 4096))
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := make([]byte, 4096)
		copy(buf, data)
		var w strings.Builder
		c, _ := nvmeof.ParseIdentifyController(buf)
		_ = IDCtrlJSON(c).String()
		PrintIDCtrl(&w, c, true)
		n, _ := nvmeof.ParseIdentifyNamespace(buf)
		_ = IDNSJSON(n).String()
		PrintIDNS(&w, n, 1, true)
		s, _ := nvmeof.ParseSMARTLog(buf)
		_ = SMARTJSON(s, true).String()
		PrintSMART(&w, s, "nvme0", 1, true)
		_ = ErrorLogJSON(buf).String()
		PrintErrorLog(&w, buf, "nvme0")
		fw, _ := nvmeof.ParseFirmwareSlotLog(buf)
		_ = FWLogJSON(fw, "nvme0").String()
		PrintFWLog(&w, fw, "nvme0")
		e, _ := nvmeof.ParseCommandEffectsLog(buf)
		_ = EffectsJSON(e, buf[2])
		PrintEffects(&w, e, buf[2], true)
		if l, err := nvmeof.ParseANALog(data); err == nil {
			_ = ANAJSON(l, "nvme0").String()
			PrintANA(&w, l, "nvme0")
		}
		PrintFeature(&w, buf[0], buf[1], binary.LittleEndian.Uint32(buf[4:]), data, true)
		HexDump(&w, data)
	})
}

// TestEffectsGolden: nvmetd's Commands Supported and Effects log as
// nvme-cli 2.3 printed it (effects-log -c 0, JSON and normal).
func TestEffectsGolden(t *testing.T) {
	var l nvmeof.CommandEffectsLog
	for _, op := range []uint8{2, 6, 8, 9, 10, 12, 24} {
		l.SetACS(op, 1)
	}
	for op, v := range map[uint8]uint32{0: 1, 1: 3, 2: 1, 8: 3, 9: 3} {
		l.SetIOCS(op, v)
	}
	want, err := os.ReadFile("testdata/effects-log.nvme-cli-2.3.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := EffectsJSON(&l, 0) + "\n"; got != string(want) {
		t.Errorf("effects-log json:\n%s\nwant:\n%s", got, want)
	}
	want, err = os.ReadFile("testdata/effects-log.nvme-cli-2.3.txt")
	if err != nil {
		t.Fatal(err)
	}
	var w strings.Builder
	PrintEffects(&w, &l, 0, false)
	if w.String() != string(want) {
		t.Errorf("effects-log:\n%q\nwant:\n%q", w.String(), want)
	}
}

// TestStatusString: libnvme 1.3's nvme_status_to_string(status, false),
// as nvme-cli 2.3's error-log prints it.
func TestStatusString(t *testing.T) {
	for st, want := range map[uint16]string{
		0x0000: "Successful Completion: The command completed without error",
		0x4002: "Invalid Field in Command: A reserved coded value or an unsupported value in a defined field", // DNR set
		0x0017: "unrecognized",
		0x0109: "Invalid Log Page: The log page indicated is invalid",
		0x0123: "Sanitize Prohibited While Persistent Memory Region is Enabled",
		0x012d: "Identifier Unavailable: The number of Endurance Groups or NVM Sets supported has been exceeded",
		0x0181: "Invalid Protection Information: The command's Protection Information Field settings are invalid for the namespace's Protection Information format",
		0x0281: "Unrecovered Read Error: The read data could not be recovered from the media",
		0x0302: "Asymmetric Access Inaccessible: The controller is in an inaccessible state with the requested namespace",
		0x0400: "Unknown status",
		0x07ff: "Vendor Specific Status",
	} {
		if got := StatusString(st); got != want {
			t.Errorf("%#x: %q, want %q", st, got, want)
		}
	}
}

// TestLayouts: each table names a field once, its fields do not overlap
// and stay inside the structure, and a JSON order lists exactly the
// table's fields.
func TestLayouts(t *testing.T) {
	for name, l := range map[string]*layout{"id-ctrl": &idCtrl, "id-ns": &idNS, "smart-log": &smart} {
		seen := map[string]bool{}
		used := make([]string, 4096)
		for i := range l.fields {
			f := &l.fields[i]
			if seen[f.name] {
				t.Errorf("%s: %s twice", name, f.name)
			}
			seen[f.name] = true
			width := map[kind]int{u8: 1, u16: 2, u32: 4, u64: 8, u128le: 16, ieee: 3, guid: 16}[f.kind]
			if width == 0 {
				width = f.size
			}
			n := max(f.repeat, 1)
			for r := 0; r < n; r++ {
				for o := f.off + r*f.stride; o < f.off+r*f.stride+width; o++ {
					if used[o] != "" {
						t.Errorf("%s: %s overlaps %s at byte %d", name, f.name, used[o], o)
					}
					used[o] = f.name
				}
			}
		}
		if l.jsonOrder != nil {
			if len(l.jsonOrder) != len(l.fields) {
				t.Errorf("%s: the JSON order lists %d fields, the table %d", name, len(l.jsonOrder), len(l.fields))
			}
			for _, n := range l.jsonOrder {
				if !seen[n] {
					t.Errorf("%s: the JSON order lists %s, the table does not", name, n)
				}
			}
		}
	}
	if nvmeof.IdentifyDataSize != 4096 {
		t.Fatalf("Identify data is %d bytes", nvmeof.IdentifyDataSize)
	}
}
