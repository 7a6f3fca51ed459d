package nvmeof

// Asynchronous event types (AER completion DW0 bits 2..0; NVMe Base 2.0
// Figure 147; Linux NVME_AER_*).
const (
	aerTypeSMART  = 1
	AERTypeNotice = 2
)

// Notice event information (AERTypeNotice; Linux NVME_AER_NOTICE_*).
const (
	AERNoticeNSAttrChanged    = 0x00 // namespace attribute changed: read LIDChangedNSList
	AERNoticeANAChange        = 0x03 // read LIDANA
	AERNoticeDiscoveryChanged = 0xF0 // discovery log changed: read LIDDiscovery
)

// Error event information (AERTypeError).
const (
	aerSMARTTemperature = 0x01 // AERTypeSMART: temperature threshold
)

// AEN is the DW0 of an Asynchronous Event Request completion: event type
// bits 2..0, event information bits 15..8, log page identifier bits 23..16
// (protocol.md §9.4).
type AEN uint32

// NewAEN returns the AER completion DW0 for an event of type typ with
// information info that the host clears by reading log page lid.
func NewAEN(typ, info, lid uint8) AEN {
	return AEN(uint32(typ&7) | uint32(info)<<8 | uint32(lid)<<16)
}

// Common events a target raises.
var (
	// AENNSAttrChanged: namespaces were added, removed or resized.
	AENNSAttrChanged = NewAEN(AERTypeNotice, AERNoticeNSAttrChanged, LIDChangedNSList)
	// AENANAChange: ANA states changed.
	AENANAChange = NewAEN(AERTypeNotice, AERNoticeANAChange, LIDANA)
	// AENDiscoveryChanged: the discovery log changed.
	AENDiscoveryChanged = NewAEN(AERTypeNotice, AERNoticeDiscoveryChanged, LIDDiscovery)
)

// Type returns the asynchronous event type.
func (a AEN) Type() uint8 { return uint8(a) & 7 }

// Info returns the asynchronous event information.
func (a AEN) Info() uint8 { return uint8(a >> 8) }

// LID returns the log page to read to clear the event.
func (a AEN) LID() uint8 { return uint8(a >> 16) }
