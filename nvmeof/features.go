package nvmeof

import "fmt"

// Feature identifiers (FID; NVMe Base 2.0 Figure 326; Linux NVME_FEAT_*;
// protocol.md §10.4).
const (
	FeatVolatileWC       = 0x06
	FeatNumQueues        = 0x07
	FeatAsyncEventConfig = 0x0B
	FeatTimestamp        = 0x0E
	FeatKeepAliveTimer   = 0x0F
	FeatHostIdentifier   = 0x81
)

// Get Features select values (SEL, CDW10 bits 10..8).
const (
	FeatSelCurrent   = 0
	featSelSupported = 3 // result DW0: FeatCap* bits
)

// FeaturesCmd is a view of a Set Features (admin 0x09) or Get Features
// (0x0A) command: CDW10 FID 7..0, SEL 10..8 (Get), SV bit 31 (Set); CDW11
// the feature value; CDW14 UUID index 6..0.
type FeaturesCmd struct{ *SQE }

// FeaturesCmd returns the Set/Get Features view of s.
func (s *SQE) FeaturesCmd() FeaturesCmd { return FeaturesCmd{s} }

// BuildSetFeatures fills s with a Set Features of fid for namespace nsid (0
// for controller features) with CDW11 value; save asks to persist it (SV).
// Features with a data structure (Timestamp, Host Behavior, Host
// Identifier) need SGL1 set too.
func (s *SQE) BuildSetFeatures(fid uint8, nsid uint32, value uint32, save bool) FeaturesCmd {
	s.init(AdminSetFeatures)
	c := FeaturesCmd{s}
	c.SetNSID(nsid)
	c.SetFID(fid)
	c.SetSV(save)
	c.SetValue(value)
	return c
}

// BuildGetFeatures fills s with a Get Features of fid for namespace nsid
// with select sel (FeatSel*). The result comes back in CQE DW0.
func (s *SQE) BuildGetFeatures(fid uint8, nsid uint32, sel uint8) FeaturesCmd {
	s.init(AdminGetFeatures)
	c := FeaturesCmd{s}
	c.SetNSID(nsid)
	c.SetFID(fid)
	c.SetSEL(sel)
	return c
}

// FID returns the feature identifier.
func (c FeaturesCmd) FID() uint8 { return c.SQE[40] }

// SetFID sets the feature identifier.
func (c FeaturesCmd) SetFID(v uint8) { c.SQE[40] = v }

// sel returns the Get Features select field (FeatSel*).
func (c FeaturesCmd) sel() uint8 { return c.SQE[41] & 7 }

// SetSEL sets the Get Features select field.
func (c FeaturesCmd) SetSEL(v uint8) { c.SQE[41] = c.SQE[41]&^7 | v&7 }

// sv reports the Set Features save bit (CDW10 bit 31).
func (c FeaturesCmd) sv() bool { return c.SQE[43]&0x80 != 0 }

// SetSV sets the save bit.
func (c FeaturesCmd) SetSV(v bool) {
	if v {
		c.SQE[43] |= 0x80
	} else {
		c.SQE[43] &^= 0x80
	}
}

// Value returns CDW11, the feature specific value.
func (c FeaturesCmd) Value() uint32 { return c.CDW11() }

// SetValue sets CDW11.
func (c FeaturesCmd) SetValue(v uint32) { c.SetCDW11(v) }

// uuidIndex returns the UUID index (CDW14 6..0).
func (c FeaturesCmd) uuidIndex() uint8 { return c.SQE[56] & 0x7F }

// setUUIDIndex sets the UUID index.
func (c FeaturesCmd) setUUIDIndex(v uint8) { c.SQE[56] = c.SQE[56]&0x80 | v&0x7F }

// EncodeNumQueues returns the Number of Queues value (Set Features CDW11 or
// the completion DW0) for nsq submission and ncq completion queues, both 1's
// based counts in 1..65535: NSQR 15..0 | NCQR 31..16, 0's based. The Linux
// host asks for n-1 | (n-1)<<16 and uses min(NSQA, NCQA)+1 I/O queues.
func EncodeNumQueues(nsq, ncq int) uint32 {
	return uint32(uint16(nsq-1)) | uint32(uint16(ncq-1))<<16
}

// DecodeNumQueues returns the 1's based submission and completion queue
// counts of a Number of Queues value. A request of 65536 (0xFFFF) must be
// answered with Invalid Field (NVMe Base 2.0 §5.27.1.7).
func DecodeNumQueues(v uint32) (nsq, ncq int) {
	return int(v&0xFFFF) + 1, int(v>>16) + 1
}

// Arbitration is the Arbitration feature (FID 0x01): AB 2..0 (burst as a
// power of two, 7 = no limit), LPW 15..8, MPW 23..16, HPW 31..24.
type Arbitration struct{ AB, LPW, MPW, HPW uint8 }

// Encode returns the CDW11 value.
func (a Arbitration) Encode() uint32 {
	return uint32(a.AB&7) | uint32(a.LPW)<<8 | uint32(a.MPW)<<16 | uint32(a.HPW)<<24
}

// DecodeArbitration decodes an Arbitration value.
func DecodeArbitration(v uint32) Arbitration {
	return Arbitration{AB: uint8(v) & 7, LPW: uint8(v >> 8), MPW: uint8(v >> 16), HPW: uint8(v >> 24)}
}

// PowerManagement is the Power Management feature (FID 0x02): PS 4..0
// power state, WH 7..5 workload hint.
type PowerManagement struct{ PS, WH uint8 }

// Encode returns the CDW11 value.
func (p PowerManagement) Encode() uint32 { return uint32(p.PS&0x1F) | uint32(p.WH&7)<<5 }

// DecodePowerManagement decodes a Power Management value.
func DecodePowerManagement(v uint32) PowerManagement {
	return PowerManagement{PS: uint8(v) & 0x1F, WH: uint8(v>>5) & 7}
}

// TemperatureThreshold is the Temperature Threshold feature (FID 0x04):
// TMPTH 15..0 in kelvin, TMPSEL 19..16 (0 composite, 1..8 sensors, 0xF
// all), THSEL 21..20 (0 over, 1 under), TMPTHH 24..22 (NVMe 2.0 hysteresis).
type TemperatureThreshold struct {
	TMPTH  uint16
	TMPSEL uint8
	THSEL  uint8
}

// Temperature threshold types (THSEL).
const (
	thselUnder = 1
)

// Encode returns the CDW11 value.
func (t TemperatureThreshold) Encode() uint32 {
	return uint32(t.TMPTH) | uint32(t.TMPSEL&0xF)<<16 | uint32(t.THSEL&3)<<20
}

// DecodeTemperatureThreshold decodes a Temperature Threshold value.
func DecodeTemperatureThreshold(v uint32) TemperatureThreshold {
	return TemperatureThreshold{TMPTH: uint16(v), TMPSEL: uint8(v>>16) & 0xF, THSEL: uint8(v>>20) & 3}
}

// ErrorRecovery is the Error Recovery feature (FID 0x05): TLER 15..0 time
// limited error recovery in 100 ms units, DULBE bit 16.
type ErrorRecovery struct {
	TLER  uint16
	DULBE bool
}

// Encode returns the CDW11 value.
func (e ErrorRecovery) Encode() uint32 { return uint32(e.TLER) | uint32(b2u(e.DULBE))<<16 }

// DecodeErrorRecovery decodes an Error Recovery value.
func DecodeErrorRecovery(v uint32) ErrorRecovery {
	return ErrorRecovery{TLER: uint16(v), DULBE: v&(1<<16) != 0}
}

// VolatileWCEnable is the Volatile Write Cache feature (FID 0x06) bit 0:
// the write cache is enabled.
const VolatileWCEnable = 1 << 0

// IRQCoalescing is the Interrupt Coalescing feature (FID 0x08; meaningless
// on fabrics, where there are no interrupts): THR 7..0 aggregation
// threshold (0's based), TIME 15..8 in 100 µs units.
type IRQCoalescing struct{ THR, TIME uint8 }

// Encode returns the CDW11 value.
func (c IRQCoalescing) Encode() uint32 { return uint32(c.THR) | uint32(c.TIME)<<8 }

// DecodeIRQCoalescing decodes an Interrupt Coalescing value.
func DecodeIRQCoalescing(v uint32) IRQCoalescing {
	return IRQCoalescing{THR: uint8(v), TIME: uint8(v >> 8)}
}

// Asynchronous Event Configuration bits (FID 0x0B CDW11; also Identify
// Controller OAES; Linux NVME_AEN_CFG_*). The Linux host enables OAES ∩
// {NSAttr, FWActivation, ANAChange, DiscoveryChange} and sends an AER only
// if that is non-zero (protocol.md §9.4).
const (
	aecSMARTMask       = 0xFF    // bits 7..0: SMART critical warnings to report
	AECNSAttr          = 1 << 8  // namespace attribute notices
	AECFWActivation    = 1 << 9  // firmware activation notices
	AECANAChange       = 1 << 11 // asymmetric namespace access change notices
	AECDiscoveryChange = 1 << 31 // discovery log page change (discovery controllers)
	AECLinuxHostMask   = AECNSAttr | AECFWActivation | AECANAChange | AECDiscoveryChange
)

// Host Identifier feature (FID 0x81) CDW11 bit 0: the host identifier is the
// extended 128-bit one (16 bytes of data; 8 bytes otherwise).
const HostIDExtended = 1 << 0

// EncodeTimestamp writes the 8-byte Timestamp feature data (FID 0x0E; NVMe
// Base 2.0 Figure 353) into dst: the milliseconds since the Unix epoch in
// bytes 0..5, then byte 6 with Synch (bit 0) and Timestamp Origin (bits 3..1).
func EncodeTimestamp(dst []byte, ms uint64, origin uint8, synch bool) error {
	if len(dst) < TimestampSize {
		return truncated("timestamp", len(dst), TimestampSize)
	}
	if ms >= 1<<48 {
		return fmt.Errorf("nvmeof: timestamp %d ms does not fit 48 bits: %w", ms, ErrMalformed)
	}
	var b [8]byte
	le.PutUint64(b[:], ms)
	copy(dst, b[:6])
	dst[6] = uint8(b2u(synch)) | (origin&7)<<1
	dst[7] = 0
	return nil
}

// DecodeTimestamp decodes Timestamp feature data.
func DecodeTimestamp(b []byte) (ms uint64, origin uint8, synch bool, err error) {
	if len(b) < TimestampSize {
		return 0, 0, false, truncated("timestamp", len(b), TimestampSize)
	}
	var t [8]byte
	copy(t[:6], b)
	return le.Uint64(t[:]), b[6] >> 1 & 7, b[6]&1 != 0, nil
}

// HostBehavior is the 512-byte Host Behavior Support feature data (FID
// 0x16; Linux struct nvme_feat_host_behavior). The Linux host sets it only
// when Identify Controller CRDT or CTRATT ELBAS ask for it.
type HostBehavior [HostBehaviorSize]byte

// ParseHostBehavior returns a view of the first 512 bytes of b; the view
// aliases b.
func ParseHostBehavior(b []byte) (*HostBehavior, error) {
	if len(b) < HostBehaviorSize {
		return nil, truncated("host behavior", len(b), HostBehaviorSize)
	}
	return (*HostBehavior)(b[:HostBehaviorSize]), nil
}

// acre returns the advanced command retry enable (1: the host honours CRD).
func (h *HostBehavior) acre() uint8 { return h[0] }

// setACRE sets ACRE.
func (h *HostBehavior) setACRE(x uint8) { h[0] = x }

// setETDAS sets ETDAS.
func (h *HostBehavior) setETDAS(x uint8) { h[1] = x }

// setLBAFEE sets LBAFEE.
func (h *HostBehavior) setLBAFEE(x uint8) { h[2] = x }
