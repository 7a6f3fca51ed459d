package nvmeof

import "fmt"

// Log page identifiers (NVMe Base 2.0 Figure 202; Linux NVME_LOG_*).
const (
	LIDErrorInfo      = 0x01 // Error Information, 64-byte entries
	LIDSMART          = 0x02 // SMART / Health Information, 512 bytes
	LIDFirmwareSlot   = 0x03 // Firmware Slot Information, 512 bytes
	LIDChangedNSList  = 0x04 // Changed Namespace List, 4096 bytes
	LIDCommandEffects = 0x05 // Commands Supported and Effects, 4096 bytes
	LIDANA            = 0x0C // Asymmetric Namespace Access
	LIDDiscovery      = 0x70 // Discovery log (discovery controllers only)
)

// GetLogPageCmd is a view of a Get Log Page command (admin 0x02;
// protocol.md §10.3): CDW10 LID 7..0, LSP 14..8, RAE 15, NUMDL 31..16;
// CDW11 NUMDU 15..0, LSI 31..16; CDW12..13 LPO (byte offset); CDW14 UUID
// index 6..0, OT 23, CSI 31..24.
type GetLogPageCmd struct{ *SQE }

// GetLogPageCmd returns the Get Log Page view of s.
func (s *SQE) GetLogPageCmd() GetLogPageCmd { return GetLogPageCmd{s} }

// BuildGetLogPage fills s with a Get Log Page of log lid for namespace nsid
// (NSIDAll for controller-wide logs), reading numBytes bytes at byte offset
// lpo. numBytes is rounded up to whole dwords; 0 reads one dword. Set SGL1 to
// the same length.
func (s *SQE) BuildGetLogPage(lid uint8, nsid uint32, lpo uint64, numBytes uint32) GetLogPageCmd {
	s.init(AdminGetLogPage)
	c := GetLogPageCmd{s}
	c.SetNSID(nsid)
	c.SetLID(lid)
	c.SetLPO(lpo)
	c.SetNumBytes(numBytes)
	return c
}

// LID returns the log page identifier.
func (c GetLogPageCmd) LID() uint8 { return c.SQE[40] }

// SetLID sets the log page identifier.
func (c GetLogPageCmd) SetLID(v uint8) { c.SQE[40] = v }

// LSP returns the log specific parameter (7 bits; for the ANA log, bit 0 is RGO).
func (c GetLogPageCmd) LSP() uint8 { return c.SQE[41] & 0x7F }

// SetLSP sets the log specific parameter.
func (c GetLogPageCmd) SetLSP(v uint8) { c.SQE[41] = c.SQE[41]&0x80 | v&0x7F }

// RAE reports Retain Asynchronous Event: when clear, reading the log clears
// the pending event that pointed to it.
func (c GetLogPageCmd) RAE() bool { return c.SQE[41]&0x80 != 0 }

// SetRAE sets Retain Asynchronous Event.
func (c GetLogPageCmd) SetRAE(v bool) {
	if v {
		c.SQE[41] |= 0x80
	} else {
		c.SQE[41] &^= 0x80
	}
}

// NUMD returns the 0's based number of dwords to read: NUMDU<<16 | NUMDL.
func (c GetLogPageCmd) NUMD() uint32 {
	return uint32(le.Uint16(c.SQE[44:]))<<16 | uint32(le.Uint16(c.SQE[42:]))
}

// SetNUMD sets the 0's based number of dwords (NUMDL and NUMDU).
func (c GetLogPageCmd) SetNUMD(v uint32) {
	le.PutUint16(c.SQE[42:], uint16(v))
	le.PutUint16(c.SQE[44:], uint16(v>>16))
}

// NumBytes returns the number of bytes to read: (NUMD+1)*4.
func (c GetLogPageCmd) NumBytes() uint64 { return (uint64(c.NUMD()) + 1) * 4 }

// SetNumBytes sets NUMD for n bytes, rounded up to whole dwords (0 reads one
// dword).
func (c GetLogPageCmd) SetNumBytes(n uint32) {
	d := (uint64(n) + 3) / 4
	if d == 0 {
		d = 1
	}
	c.SetNUMD(uint32(d - 1))
}

// lsi returns the log specific identifier (CDW11 31..16).
func (c GetLogPageCmd) lsi() uint16 { return le.Uint16(c.SQE[46:]) }

// setLSI sets the log specific identifier.
func (c GetLogPageCmd) setLSI(v uint16) { le.PutUint16(c.SQE[46:], v) }

// LPO returns the log page offset in bytes (CDW12 low, CDW13 high).
func (c GetLogPageCmd) LPO() uint64 { return le.Uint64(c.SQE[48:]) }

// SetLPO sets the log page offset in bytes.
func (c GetLogPageCmd) SetLPO(v uint64) { le.PutUint64(c.SQE[48:], v) }

// uuidIndex returns the UUID index (CDW14 6..0).
func (c GetLogPageCmd) uuidIndex() uint8 { return c.SQE[56] & 0x7F }

// setUUIDIndex sets the UUID index.
func (c GetLogPageCmd) setUUIDIndex(v uint8) { c.SQE[56] = c.SQE[56]&0x80 | v&0x7F }

// OT reports Offset Type (CDW14 bit 23): the offset is an index (of log
// entries) rather than a byte offset.
func (c GetLogPageCmd) OT() bool { return c.SQE[58]&0x80 != 0 }

// setOT sets Offset Type.
func (c GetLogPageCmd) setOT(v bool) {
	if v {
		c.SQE[58] |= 0x80
	} else {
		c.SQE[58] &^= 0x80
	}
}

// CSI returns the command set identifier (CDW14 31..24).
func (c GetLogPageCmd) CSI() uint8 { return c.SQE[59] }

// SetCSI sets the command set identifier.
func (c GetLogPageCmd) SetCSI(v uint8) { c.SQE[59] = v }

// CopyLogPage serves a Get Log Page read of a log whose full content is
// page: it copies page[lpo:] into dst and zero-fills the rest of dst (a
// host may read past the end of a log, as nvmet does for the discovery
// log). It returns StatusInvalidField|DNR if lpo lies beyond the end of the
// page (NVMe Base 2.0 §5.16: "If the LPO is larger than the log page size").
func CopyLogPage(dst, page []byte, lpo uint64) error {
	if lpo > uint64(len(page)) {
		return fmt.Errorf("nvmeof: log page offset %d beyond %d bytes: %w", lpo, len(page), StatusInvalidField|StatusDNR)
	}
	n := copy(dst, page[lpo:])
	clear(dst[n:])
	return nil
}

// ErrorLogEntry is a 64-byte Error Information log entry (LID 0x01; NVMe
// Base 2.0 Figure 205; Linux struct nvme_error_slot), viewed in place.
type ErrorLogEntry [ErrorLogEntrySize]byte

// ParseErrorLogEntry returns a view of the first 64 bytes of b; the view
// aliases b.
func ParseErrorLogEntry(b []byte) (*ErrorLogEntry, error) {
	if len(b) < ErrorLogEntrySize {
		return nil, truncated("error log entry", len(b), ErrorLogEntrySize)
	}
	return (*ErrorLogEntry)(b[:ErrorLogEntrySize]), nil
}

// Status returns the completion status recorded in the entry.
func (e *ErrorLogEntry) Status() Status { return StatusFromWire(e.StatusField()) }

// SetStatus records a completion status (phase tag 0).
func (e *ErrorLogEntry) SetStatus(s Status) { e.SetStatusField(s.Wire()) }

// SMARTLog is the 512-byte SMART / Health Information log page (LID 0x02;
// NVMe Base 2.0 §5.16.1.3 Figure 207; Linux struct nvme_smart_log), viewed in
// place. The Linux host reads it (NSID 0xFFFFFFFF) for hwmon and tolerates
// errors.
type SMARTLog [SMARTLogSize]byte

// ParseSMARTLog returns a view of the first 512 bytes of b; the view
// aliases b.
func ParseSMARTLog(b []byte) (*SMARTLog, error) {
	if len(b) < SMARTLogSize {
		return nil, truncated("SMART log", len(b), SMARTLogSize)
	}
	return (*SMARTLog)(b[:SMARTLogSize]), nil
}

// SMART critical warning bits (Linux NVME_SMART_CRIT_*).
const (
	SMARTCritSpare          = 1 << 0 // available spare below threshold
	SMARTCritTemperature    = 1 << 1 // temperature outside a threshold
	SMARTCritReliability    = 1 << 2 // NVM subsystem reliability degraded
	SMARTCritReadOnly       = 1 << 3 // media placed in read only mode
	SMARTCritVolatileMemory = 1 << 4 // volatile memory backup failed
)

// tempSensor returns temperature sensor i (1..8) in kelvin (0: not
// implemented), or 0 for i out of range.
func (l *SMARTLog) tempSensor(i int) uint16 {
	if i < 1 || i > 8 {
		return 0
	}
	return le.Uint16(l[200+2*(i-1):])
}

// setTempSensor sets temperature sensor i (1..8); other i are ignored.
func (l *SMARTLog) setTempSensor(i int, kelvin uint16) {
	if i < 1 || i > 8 {
		return
	}
	le.PutUint16(l[200+2*(i-1):], kelvin)
}

// FirmwareSlotLog is the 512-byte Firmware Slot Information log page (LID
// 0x03; NVMe Base 2.0 Figure 208): AFI at byte 0 and the revisions of slots
// 1..7 at 8+8(i-1).
type FirmwareSlotLog [FirmwareSlotLogSize]byte

// ParseFirmwareSlotLog returns a view of the first 512 bytes of b; the view
// aliases b.
func ParseFirmwareSlotLog(b []byte) (*FirmwareSlotLog, error) {
	if len(b) < FirmwareSlotLogSize {
		return nil, truncated("firmware slot log", len(b), FirmwareSlotLogSize)
	}
	return (*FirmwareSlotLog)(b[:FirmwareSlotLogSize]), nil
}

// afi returns the active firmware info: bits 2..0 the active slot, bits 6..4
// the slot activated at the next reset.
func (l *FirmwareSlotLog) afi() uint8 { return l[0] }

// SetAFI sets the active firmware info.
func (l *FirmwareSlotLog) SetAFI(v uint8) { l[0] = v }

// frs returns the firmware revision in slot (1..7), without padding, or ""
// for a slot out of range.
func (l *FirmwareSlotLog) frs(slot int) string {
	if slot < 1 || slot > 7 {
		return ""
	}
	return paddedString(l[8*slot : 8*slot+8])
}

// SetFRS sets the firmware revision in slot (1..7), space-padded to 8 bytes
// (an empty revision is all zeros: slot empty); other slots are ignored.
func (l *FirmwareSlotLog) SetFRS(slot int, rev string) {
	if slot < 1 || slot > 7 {
		return
	}
	f := l[8*slot : 8*slot+8]
	if rev == "" {
		clear(f)
		return
	}
	putPadded(f, rev, ' ')
}

// EncodeChangedNSList writes the Changed Namespace List log page (LID 0x04;
// NVMe Base 2.0 Figure 209) into dst: the NSIDs, then zeros to the end of
// dst. If there are more NSIDs than fit (1024 in the 4096-byte page) the
// list holds only 0xFFFFFFFF followed by zeros, telling the host to rescan.
func EncodeChangedNSList(dst []byte, nsids []uint32) {
	max := min(len(dst)/4, MaxChangedNamespaces)
	if len(nsids) > max {
		clear(dst)
		if len(dst) >= 4 {
			le.PutUint32(dst, NSIDAll)
		}
		return
	}
	for i, id := range nsids {
		le.PutUint32(dst[4*i:], id)
	}
	clear(dst[4*len(nsids):])
}

// ParseChangedNSList decodes a Changed Namespace List log page: b must hold
// the 4096-byte page. It appends the NSIDs up to the first zero entry to dst;
// overflow is true if the page says more than 1024 namespaces changed
// (first entry 0xFFFFFFFF), in which case no NSIDs are returned.
func ParseChangedNSList(b []byte, dst []uint32) (nsids []uint32, overflow bool, err error) {
	if len(b) < ChangedNSListSize {
		return dst, false, truncated("changed namespace list", len(b), ChangedNSListSize)
	}
	if le.Uint32(b) == NSIDAll {
		return dst, true, nil
	}
	for i := 0; i < MaxChangedNamespaces; i++ {
		id := le.Uint32(b[4*i:])
		if id == 0 {
			break
		}
		if id == NSIDAll {
			return dst, false, malformed("changed namespace list", "entry %d is 0xFFFFFFFF", i)
		}
		dst = append(dst, id)
	}
	return dst, false, nil
}

// CommandEffectsLog is the 4096-byte Commands Supported and Effects log page
// (LID 0x05; NVMe Base 2.0 Figure 210; Linux struct nvme_effects_log): one
// dword per admin opcode at 4*op and per I/O opcode at 1024+4*op. The Linux
// host reads it when Identify Controller LPA bit 1 is set.
type CommandEffectsLog [CommandEffectsLogSize]byte

// ParseCommandEffectsLog returns a view of the first 4096 bytes of b; the
// view aliases b.
func ParseCommandEffectsLog(b []byte) (*CommandEffectsLog, error) {
	if len(b) < CommandEffectsLogSize {
		return nil, truncated("commands supported and effects log", len(b), CommandEffectsLogSize)
	}
	return (*CommandEffectsLog)(b[:CommandEffectsLogSize]), nil
}

// Command effects bits (Linux NVME_CMD_EFFECTS_*).
const (
	EffectsCSUPP = 1 << 0 // command supported
	EffectsLBCC  = 1 << 1 // logical block content change
)

// ACS returns the effects of admin opcode op.
func (l *CommandEffectsLog) ACS(op uint8) uint32 { return le.Uint32(l[4*int(op):]) }

// SetACS sets the effects of admin opcode op.
func (l *CommandEffectsLog) SetACS(op uint8, v uint32) { le.PutUint32(l[4*int(op):], v) }

// IOCS returns the effects of I/O opcode op.
func (l *CommandEffectsLog) IOCS(op uint8) uint32 { return le.Uint32(l[1024+4*int(op):]) }

// SetIOCS sets the effects of I/O opcode op.
func (l *CommandEffectsLog) SetIOCS(op uint8, v uint32) { le.PutUint32(l[1024+4*int(op):], v) }

// ErrorCount returns the unique, incrementing error count of the entry (0: empty entry).
func (e *ErrorLogEntry) ErrorCount() uint64 { return le.Uint64(e[0:]) }

// SetErrorCount sets ErrorCount.
func (e *ErrorLogEntry) SetErrorCount(x uint64) { le.PutUint64(e[0:], x) }

// SetSQID sets SQID.
func (e *ErrorLogEntry) SetSQID(x uint16) { le.PutUint16(e[8:], x) }

// SetCID sets CID.
func (e *ErrorLogEntry) SetCID(x uint16) { le.PutUint16(e[10:], x) }

// StatusField returns the status field of the completion (Status<<1 | phase).
func (e *ErrorLogEntry) StatusField() uint16 { return le.Uint16(e[12:]) }

// SetStatusField sets StatusField.
func (e *ErrorLogEntry) SetStatusField(x uint16) { le.PutUint16(e[12:], x) }

// SetParamErrorLocation sets ParamErrorLocation.
func (e *ErrorLogEntry) SetParamErrorLocation(x uint16) { le.PutUint16(e[14:], x) }

// SetLBA sets LBA.
func (e *ErrorLogEntry) SetLBA(x uint64) { le.PutUint64(e[16:], x) }

// SetNSID sets NSID.
func (e *ErrorLogEntry) SetNSID(x uint32) { le.PutUint32(e[24:], x) }

// setVSInfo sets VSInfo.
func (e *ErrorLogEntry) setVSInfo(x uint8) { e[28] = x }

// setTRTYPE sets TRTYPE.
func (e *ErrorLogEntry) setTRTYPE(x uint8) { e[29] = x }

// setCommandSpecific sets CommandSpecific.
func (e *ErrorLogEntry) setCommandSpecific(x uint64) { le.PutUint64(e[32:], x) }

// setTransportSpecific sets TransportSpecific.
func (e *ErrorLogEntry) setTransportSpecific(x uint16) { le.PutUint16(e[40:], x) }

// criticalWarning returns the critical warning bits (SMARTCrit*).
func (l *SMARTLog) criticalWarning() uint8 { return l[0] }

// SetCriticalWarning sets CriticalWarning.
func (l *SMARTLog) SetCriticalWarning(x uint8) { l[0] = x }

// SetCompositeTemperature sets CompositeTemperature.
func (l *SMARTLog) SetCompositeTemperature(x uint16) { le.PutUint16(l[1:], x) }

// AvailableSpare returns the available spare capacity in percent.
func (l *SMARTLog) AvailableSpare() uint8 { return l[3] }

// SetAvailableSpare sets AvailableSpare.
func (l *SMARTLog) SetAvailableSpare(x uint8) { l[3] = x }

// SetAvailableSpareThreshold sets AvailableSpareThreshold.
func (l *SMARTLog) SetAvailableSpareThreshold(x uint8) { l[4] = x }

// SetPercentageUsed sets PercentageUsed.
func (l *SMARTLog) SetPercentageUsed(x uint8) { l[5] = x }

// setEnduranceGroupCriticalWarning sets EnduranceGroupCriticalWarning.
func (l *SMARTLog) setEnduranceGroupCriticalWarning(x uint8) { l[6] = x }

// dataUnitsRead returns the data units read, in thousands of 512-byte units.
func (l *SMARTLog) dataUnitsRead() Uint128 { return getU128(l[32:]) }

// SetDataUnitsRead sets DataUnitsRead.
func (l *SMARTLog) SetDataUnitsRead(x Uint128) { putU128(l[32:], x) }

// DataUnitsWritten returns the data units written, in thousands of 512-byte units.
func (l *SMARTLog) DataUnitsWritten() Uint128 { return getU128(l[48:]) }

// SetDataUnitsWritten sets DataUnitsWritten.
func (l *SMARTLog) SetDataUnitsWritten(x Uint128) { putU128(l[48:], x) }

// HostReadCommands returns the number of read commands completed.
func (l *SMARTLog) HostReadCommands() Uint128 { return getU128(l[64:]) }

// SetHostReadCommands sets HostReadCommands.
func (l *SMARTLog) SetHostReadCommands(x Uint128) { putU128(l[64:], x) }

// HostWriteCommands returns the number of write commands completed.
func (l *SMARTLog) HostWriteCommands() Uint128 { return getU128(l[80:]) }

// SetHostWriteCommands sets HostWriteCommands.
func (l *SMARTLog) SetHostWriteCommands(x Uint128) { putU128(l[80:], x) }

// SetControllerBusyTime sets ControllerBusyTime.
func (l *SMARTLog) SetControllerBusyTime(x Uint128) { putU128(l[96:], x) }

// PowerCycles returns the number of power cycles.
func (l *SMARTLog) PowerCycles() Uint128 { return getU128(l[112:]) }

// SetPowerCycles sets PowerCycles.
func (l *SMARTLog) SetPowerCycles(x Uint128) { putU128(l[112:], x) }

// powerOnHours returns the power-on hours.
func (l *SMARTLog) powerOnHours() Uint128 { return getU128(l[128:]) }

// SetPowerOnHours sets PowerOnHours.
func (l *SMARTLog) SetPowerOnHours(x Uint128) { putU128(l[128:], x) }

// SetUnsafeShutdowns sets UnsafeShutdowns.
func (l *SMARTLog) SetUnsafeShutdowns(x Uint128) { putU128(l[144:], x) }

// SetMediaErrors sets MediaErrors.
func (l *SMARTLog) SetMediaErrors(x Uint128) { putU128(l[160:], x) }

// SetErrorLogEntries sets ErrorLogEntries.
func (l *SMARTLog) SetErrorLogEntries(x Uint128) { putU128(l[176:], x) }

// setWarningTempTime sets WarningTempTime.
func (l *SMARTLog) setWarningTempTime(x uint32) { le.PutUint32(l[192:], x) }

// setCriticalTempTime sets CriticalTempTime.
func (l *SMARTLog) setCriticalTempTime(x uint32) { le.PutUint32(l[196:], x) }

// setTMT1TransitionCount sets TMT1TransitionCount.
func (l *SMARTLog) setTMT1TransitionCount(x uint32) { le.PutUint32(l[216:], x) }

// setTMT2TransitionCount sets TMT2TransitionCount.
func (l *SMARTLog) setTMT2TransitionCount(x uint32) { le.PutUint32(l[220:], x) }

// setTMT1TotalTime sets TMT1TotalTime.
func (l *SMARTLog) setTMT1TotalTime(x uint32) { le.PutUint32(l[224:], x) }

// setTMT2TotalTime sets TMT2TotalTime.
func (l *SMARTLog) setTMT2TotalTime(x uint32) { le.PutUint32(l[228:], x) }
