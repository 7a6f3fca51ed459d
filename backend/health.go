package backend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/dswarbrick/smart/ata"
	"golang.org/x/sys/unix"
)

// noHealthReasons explains, per bus, why a block device has no health.
var noHealthReasons = map[string]string{
	"loop":   "loop device: no device-reported health (see the backing file's disk)",
	"virtio": "virtio disk: the hypervisor does not pass device health through",
	"dm":     "device-mapper device: health belongs to the underlying disks",
	"md":     "md RAID device: health belongs to the member disks",
	"zram":   "zram device: compressed RAM has no device health",
	"scsi":   "SCSI/SAS disk: structured health (LOG SENSE) is not implemented; see HealthReport",
	"other":  "block device of unknown type: no device-reported health",
}

// Health reads device health: the NVMe SMART / Health log, or ATA SMART
// attributes for SATA disks. Other devices report Available false with a
// reason and no error. See [Backend].
func (b *Block) Health() (Health, error) {
	if err := b.io.acquire(); err != nil {
		return Health{}, err
	}
	b.io.release()
	bus := b.info.Bus
	if bus != "nvme" && bus != "sata" {
		r, ok := noHealthReasons[bus]
		if !ok {
			r = noHealthReasons["other"]
		}
		return Health{Reason: r}, nil
	}
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	// Commands go to the whole disk's node: the kernel refuses SG_IO on
	// partitions, and the NVMe SMART log is per controller anyway.
	node := b.dev.diskNode()
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Health{Reason: "cannot open " + node}, fmt.Errorf("backend block %s: health: open %s: %w", b.io.path, node, err)
	}
	defer unix.Close(fd)
	var h Health
	if bus == "nvme" {
		h, err = nvmeHealth(fd)
	} else {
		h, err = ataHealth(fd)
	}
	if err != nil {
		return Health{Reason: err.Error()}, fmt.Errorf("backend block %s: health: %w", b.io.path, err)
	}
	return h, nil
}

// nvmePassthruCmd is struct nvme_passthru_cmd of <linux/nvme_ioctl.h>.
type nvmePassthruCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	CDW2        uint32
	CDW3        uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	CDW10       uint32
	CDW11       uint32
	CDW12       uint32
	CDW13       uint32
	CDW14       uint32
	CDW15       uint32
	TimeoutMs   uint32
	Result      uint32
}

// nvmeIoctlAdminCmd is NVME_IOCTL_ADMIN_CMD, _IOWR('N', 0x41, struct
// nvme_admin_cmd).
const nvmeIoctlAdminCmd = 0xC0000000 | uint(unsafe.Sizeof(nvmePassthruCmd{}))<<16 | 'N'<<8 | 0x41

// nvmeHealth reads the SMART / Health Information log (Get Log Page, log
// identifier 02h, NVMe Base Specification 2.0 §5.16.1.3) for the whole
// controller (NSID FFFFFFFFh).
func nvmeHealth(fd int) (Health, error) {
	buf := make([]byte, 512)
	// The kernel writes into buf through an address inside cmd: pin it so
	// that it is heap-allocated and stays put.
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	cmd := nvmePassthruCmd{
		Opcode:    0x02, // Get Log Page
		NSID:      0xFFFFFFFF,
		Addr:      uint64(uintptr(unsafe.Pointer(&buf[0]))),
		DataLen:   uint32(len(buf)),
		CDW10:     0x02 | uint32(len(buf)/4-1)<<16, // LID 02h, NUMDL
		TimeoutMs: 10000,
	}
	if err := ioctlPtr(fd, nvmeIoctlAdminCmd, unsafe.Pointer(&cmd)); err != nil {
		return Health{}, fmt.Errorf("nvme get log page 02h: %w", err)
	}
	return parseNVMeSMARTLog(buf)
}

// parseNVMeSMARTLog decodes a 512-byte NVMe SMART / Health log.
func parseNVMeSMARTLog(b []byte) (Health, error) {
	if len(b) < 512 {
		return Health{}, fmt.Errorf("nvme smart log: %d bytes, want 512", len(b))
	}
	le := binary.LittleEndian
	u128 := func(off int) uint64 {
		if le.Uint64(b[off+8:]) != 0 {
			return math.MaxUint64
		}
		return le.Uint64(b[off:])
	}
	return Health{
		Available:               true,
		Reason:                  "nvme smart log",
		Valid:                   HealthAll,
		CriticalWarning:         b[0],
		TemperatureKelvin:       le.Uint16(b[1:]),
		AvailableSpare:          b[3],
		AvailableSpareThreshold: b[4],
		PercentageUsed:          b[5],
		DataUnitsRead:           u128(32),
		DataUnitsWritten:        u128(48),
		HostReadCommands:        u128(64),
		HostWriteCommands:       u128(80),
		ControllerBusyMinutes:   u128(96),
		PowerCycles:             u128(112),
		PowerOnHours:            u128(128),
		UnsafeShutdowns:         u128(144),
		MediaErrors:             u128(160),
		ErrorLogEntries:         u128(176),
		WarningTempMinutes:      le.Uint32(b[192:]),
		CriticalTempMinutes:     le.Uint32(b[196:]),
	}, nil
}

// sgIOHdr is sg_io_hdr_t of <scsi/sg.h> (64-bit layout).
type sgIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         uintptr
	Cmdp           uintptr
	Sbp            uintptr
	Timeout        uint32
	Flags          uint32
	PackID         int32
	UsrPtr         uintptr
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
}

const (
	sgIO          = 0x2285
	sgDxferNone   = -1
	sgDxferFromDv = -3
)

// sgATA16 sends an ATA PASS-THROUGH (16) command (SAT-4 §12.2.2) and
// returns the sense data. data, if any, receives the PIO data-in transfer.
func sgATA16(fd int, cdb *[16]byte, data []byte) (sense []byte, err error) {
	sense = make([]byte, 32)
	var pin runtime.Pinner
	pin.Pin(cdb)
	pin.Pin(&sense[0])
	hdr := sgIOHdr{
		InterfaceID:    'S',
		DxferDirection: sgDxferNone,
		CmdLen:         16,
		MxSbLen:        uint8(len(sense)),
		Cmdp:           uintptr(unsafe.Pointer(cdb)),
		Sbp:            uintptr(unsafe.Pointer(&sense[0])),
		Timeout:        20000,
	}
	if len(data) > 0 {
		pin.Pin(&data[0])
		hdr.DxferDirection = sgDxferFromDv
		hdr.DxferLen = uint32(len(data))
		hdr.Dxferp = uintptr(unsafe.Pointer(&data[0]))
	}
	err = ioctlPtr(fd, sgIO, unsafe.Pointer(&hdr))
	pin.Unpin()
	if err != nil {
		return nil, err
	}
	sense = sense[:hdr.SbLenWr]
	// A transport or driver failure, or a CHECK CONDITION other than the
	// one CK_COND asks for, is an error.
	// driver_status DRIVER_SENSE (08h) only says sense data is present.
	if ds := hdr.DriverStatus & 0x0f; hdr.HostStatus != 0 || (ds != 0 && ds != 0x08) {
		return sense, fmt.Errorf("SG_IO: host status %#x, driver status %#x", hdr.HostStatus, hdr.DriverStatus)
	}
	if hdr.Status != 0 && !(hdr.Status == 0x02 && len(sense) > 0 && cdb[2]&0x20 != 0) {
		return sense, fmt.Errorf("SG_IO: SCSI status %#x, sense % x", hdr.Status, sense)
	}
	return sense, nil
}

// ataHealth reads ATA SMART data (SMART READ DATA, and SMART RETURN STATUS
// for the threshold-exceeded verdict) through SCSI ATA Translation.
func ataHealth(fd int) (Health, error) {
	page := make([]byte, 512)
	readData := [16]byte{
		0:  0x85,                // ATA PASS-THROUGH (16)
		1:  4 << 1,              // protocol: PIO data-in
		2:  0x0e,                // T_DIR from device, BYT_BLOK, T_LENGTH in sector count
		4:  ata.SMART_READ_DATA, // features
		6:  1,                   // sector count
		10: 0x4f,                // LBA mid: SMART signature
		12: 0xc2,                // LBA high
		14: ata.ATA_SMART,       // command
	}
	if _, err := sgATA16(fd, &readData, page); err != nil {
		return Health{}, fmt.Errorf("ata smart read data: %w", err)
	}
	h := parseATASMART(page)

	status := [16]byte{
		0:  0x85,
		1:  3 << 1, // protocol: non-data
		2:  0x20,   // CK_COND: return the ATA registers in the sense data
		4:  ata.SMART_RETURN_STATUS,
		10: 0x4f,
		12: 0xc2,
		14: ata.ATA_SMART,
	}
	if sense, err := sgATA16(fd, &status, nil); err == nil {
		if exceeded, ok := parseATAReturnStatus(sense); ok {
			h.Valid |= HealthCriticalWarning
			if exceeded {
				h.CriticalWarning |= CriticalWarningReliability
			}
		}
	}
	return h, nil
}

// ATA SMART attribute identifiers used (de facto standard; see the
// smartmontools drive database).
const (
	ataAttrPowerOnHours       = 9
	ataAttrPowerCycles        = 12
	ataAttrUnexpectedPowerOff = 174
	ataAttrReportedUncorrect  = 187
	ataAttrAirflowTemperature = 190
	ataAttrPowerOffRetract    = 192
	ataAttrTemperature        = 194
	ataAttrOfflineUncorrect   = 198
)

// parseATASMART derives health from a SMART READ DATA page. ATA attributes
// are vendor-defined; only those whose raw value is widely agreed on are
// used, and fields without one stay invalid.
func parseATASMART(page []byte) Health {
	var sp ata.SmartPage
	binary.Read(bytes.NewReader(page[:362]), binary.LittleEndian, &sp)
	raw := map[uint8]uint64{}
	for _, a := range sp.Attrs {
		if a.Id == 0 {
			continue
		}
		var v uint64
		for i := 5; i >= 0; i-- {
			v = v<<8 | uint64(a.VendorBytes[i])
		}
		raw[a.Id] = v
	}
	h := Health{Available: true, Reason: "ata smart"}
	set := func(f HealthFields, dst *uint64, ids ...uint8) {
		for _, id := range ids {
			if v, ok := raw[id]; ok {
				*dst = v
				h.Valid |= f
				return
			}
		}
	}
	for _, id := range []uint8{ataAttrTemperature, ataAttrAirflowTemperature} {
		// The current temperature in °C is the low byte; the others are
		// often minimum and maximum.
		if v, ok := raw[id]; ok && uint8(v) > 0 && uint8(v) < 128 {
			h.TemperatureKelvin = uint16(uint8(v)) + 273
			h.Valid |= HealthTemperature
			break
		}
	}
	var hours uint64
	set(HealthPowerOnHours, &hours, ataAttrPowerOnHours)
	h.PowerOnHours = hours & 0xffffffff // the high bytes are minutes/seconds on some drives
	set(HealthPowerCycles, &h.PowerCycles, ataAttrPowerCycles)
	set(HealthUnsafeShutdowns, &h.UnsafeShutdowns, ataAttrUnexpectedPowerOff, ataAttrPowerOffRetract)
	set(HealthMediaErrors, &h.MediaErrors, ataAttrReportedUncorrect, ataAttrOfflineUncorrect)
	return h
}

// parseATAReturnStatus reads the SMART RETURN STATUS verdict from the ATA
// Status Return sense data descriptor (SAT-4 §12.2.2.6, descriptor code
// 09h): LBA mid/high 4Fh/C2h means good, F4h/2Ch threshold exceeded.
func parseATAReturnStatus(sense []byte) (exceeded, ok bool) {
	if len(sense) < 8 || sense[0]&0x7f != 0x72 {
		return false, false // not descriptor-format sense
	}
	desc := sense[8:min(len(sense), 8+int(sense[7]))]
	for len(desc) >= 2 {
		n := 2 + int(desc[1])
		if n > len(desc) {
			break
		}
		if desc[0] == 0x09 && n >= 14 {
			mid, high := desc[9], desc[11]
			switch {
			case mid == 0x4f && high == 0xc2:
				return false, true
			case mid == 0xf4 && high == 0x2c:
				return true, true
			}
			return false, false
		}
		desc = desc[n:]
	}
	return false, false
}
