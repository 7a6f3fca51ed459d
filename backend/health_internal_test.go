package backend

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel ABI structures must have the kernel's sizes.
func TestKernelABI(t *testing.T) {
	if s := unsafe.Sizeof(nvmePassthruCmd{}); s != 72 {
		t.Errorf("struct nvme_passthru_cmd: %d bytes, want 72", s)
	}
	if nvmeIoctlAdminCmd != 0xC0484E41 {
		t.Errorf("NVME_IOCTL_ADMIN_CMD = %#x, want 0xc0484e41", nvmeIoctlAdminCmd)
	}
	if s := unsafe.Sizeof(sgIOHdr{}); unsafe.Sizeof(uintptr(0)) == 8 && s != 88 {
		t.Errorf("sg_io_hdr_t: %d bytes, want 88", s)
	}
}

func TestParseNVMeSMARTLog(t *testing.T) {
	b := make([]byte, 512)
	le := binary.LittleEndian
	b[0] = CriticalWarningReliability
	le.PutUint16(b[1:], 323) // 50 °C
	b[3], b[4], b[5] = 97, 10, 3
	le.PutUint64(b[32:], 0x123456) // data units read
	le.PutUint64(b[48:], 5)        // data units written...
	b[48+8] = 1                    // ...beyond 64 bits: saturates
	le.PutUint64(b[64:], 1000)     // host reads
	le.PutUint64(b[80:], 2000)     // host writes
	le.PutUint64(b[96:], 30)       // busy minutes
	le.PutUint64(b[112:], 40)      // power cycles
	le.PutUint64(b[128:], 8760)    // power-on hours
	le.PutUint64(b[144:], 6)       // unsafe shutdowns
	le.PutUint64(b[160:], 2)       // media errors
	le.PutUint64(b[176:], 9)       // error log entries
	le.PutUint32(b[192:], 11)      // warning temperature time
	le.PutUint32(b[196:], 12)      // critical temperature time
	h, err := parseNVMeSMARTLog(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Health{
		Available: true, Reason: "nvme smart log", Valid: HealthAll,
		CriticalWarning: CriticalWarningReliability, TemperatureKelvin: 323,
		AvailableSpare: 97, AvailableSpareThreshold: 10, PercentageUsed: 3,
		DataUnitsRead: 0x123456, DataUnitsWritten: math.MaxUint64,
		HostReadCommands: 1000, HostWriteCommands: 2000, ControllerBusyMinutes: 30,
		PowerCycles: 40, PowerOnHours: 8760, UnsafeShutdowns: 6, MediaErrors: 2,
		ErrorLogEntries: 9, WarningTempMinutes: 11, CriticalTempMinutes: 12,
	}
	if h != want {
		t.Errorf("got  %+v\nwant %+v", h, want)
	}
	if h.TemperatureCelsius() != 50 {
		t.Errorf("TemperatureCelsius = %d, want 50", h.TemperatureCelsius())
	}
	if HealthAll != 1<<9-1 {
		t.Errorf("HealthAll = %#x", HealthAll)
	}
	if _, err := parseNVMeSMARTLog(b[:511]); err == nil {
		t.Errorf("a truncated log parsed")
	}
}

func TestParseATASMART(t *testing.T) {
	page := make([]byte, 512)
	binary.LittleEndian.PutUint16(page, 0x10)
	attr := func(i int, id uint8, raw ...byte) {
		a := page[2+12*i:]
		a[0] = id
		a[3], a[4] = 100, 100 // value, worst
		copy(a[5:11], raw)
	}
	attr(0, 9, 0xf4, 0x01, 0, 0, 0x2a, 0) // 500 hours; the high bytes are not hours
	attr(1, 12, 42)
	attr(2, 192, 7)
	attr(3, 194, 40, 0, 20, 0, 55, 0) // 40 °C, min 20, max 55
	attr(4, 187, 3)
	h := parseATASMART(page)
	want := Health{
		Available: true, Reason: "ata smart",
		Valid:             HealthTemperature | HealthPowerOnHours | HealthPowerCycles | HealthUnsafeShutdowns | HealthMediaErrors,
		TemperatureKelvin: 313, PowerOnHours: 500, PowerCycles: 42, UnsafeShutdowns: 7, MediaErrors: 3,
	}
	if h != want {
		t.Errorf("got  %+v\nwant %+v", h, want)
	}
	if h := parseATASMART(make([]byte, 512)); h.Valid != 0 {
		t.Errorf("a page without attributes gave fields %#x", h.Valid)
	}
}

func TestParseATAReturnStatus(t *testing.T) {
	sense := func(mid, high byte) []byte {
		s := []byte{0x72, 0x01, 0x00, 0x1d, 0, 0, 0, 14}
		return append(s, 0x09, 0x0c, 0, 0, 0, 0, 0, 0, 0, mid, 0, high, 0, 0x50)
	}
	for _, c := range []struct {
		sense        []byte
		exceeded, ok bool
	}{
		{sense(0x4f, 0xc2), false, true},
		{sense(0xf4, 0x2c), true, true},
		{sense(0x00, 0x00), false, false},
		{[]byte{0x70, 0, 1, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false, false}, // fixed format
		{sense(0x4f, 0xc2)[:12], false, false},                                           // truncated
		{nil, false, false},
	} {
		if exceeded, ok := parseATAReturnStatus(c.sense); exceeded != c.exceeded || ok != c.ok {
			t.Errorf("parseATAReturnStatus(% x) = %v, %v; want %v, %v", c.sense, exceeded, ok, c.exceeded, c.ok)
		}
	}
}

func TestVPDSerial(t *testing.T) {
	page := append([]byte{0x00, 0x80, 0x00, 0x0c}, "  WD-1234567"...)
	if s := vpdSerial(page); s != "WD-1234567" {
		t.Errorf("vpdSerial = %q", s)
	}
	if s := vpdSerial([]byte{0, 0x83, 0, 1, 'x'}); s != "" {
		t.Errorf("vpdSerial of page 83h = %q, want empty", s)
	}
	if s := vpdSerial([]byte{0, 0x80, 0, 0x40, 'a', 'b'}); s != "ab" {
		t.Errorf("vpdSerial with an overlong length = %q", s)
	}
}

// TestSysfsVirtio identifies the machine's virtio disk through sysfs
// without opening it.
func TestSysfsVirtio(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/dev/vda", &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Skipf("no /dev/vda block device: %v", err)
	}
	d, err := sysfsDevice(st.Rdev)
	if err != nil {
		t.Skipf("no sysfs entry for /dev/vda: %v", err)
	}
	info := Info{Path: "/dev/vda"}
	d.identity(&info)
	if info.Bus != "virtio" || d.diskNode() != "/dev/vda" || d.partition != 0 {
		t.Errorf("vda: bus %q node %q partition %d", info.Bus, d.diskNode(), d.partition)
	}
	serial := strings.TrimSpace(readFile("/sys/class/block/vda/serial"))
	if info.Serial != serial || (serial != "" && info.ID != "serial::"+serial) {
		t.Errorf("vda: serial %q, ID %q; sysfs serial %q", info.Serial, info.ID, serial)
	}
	if !strings.Contains(noHealthReasons[info.Bus], "virtio") {
		t.Errorf("no virtio reason for missing health")
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
