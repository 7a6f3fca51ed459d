package nvmeof

import (
	"errors"
	"strconv"
	"strings"
)

// Status is an NVMe completion status in the layout of Linux's NVME_SC_*
// constants, i.e. the CQE status field without the phase bit (the wire value
// is Status<<1 | phase; protocol.md §8.2):
//
//	bits 7..0   SC   status code
//	bits 10..8  SCT  status code type
//	bits 12..11 CRD  command retry delay
//	bit  13     M    more (error log page has more information)
//	bit  14     DNR  do not retry
//
// Status implements error: a controller's command handlers return a Status
// (possibly wrapped) and the completion carries [StatusFromError] of it.
// The zero value is success; use [Status.Err] to turn a received status into
// a nil-or-error value.
type Status uint16

// Status code types (SCT, NVMe Base 2.0 §4.6.1.2).
const (
	SCTGeneric       = 0 // generic command status
	SCTCommand       = 1 // command specific status
	SCTMedia         = 2 // media and data integrity errors
	SCTPath          = 3 // path related status
	SCTVendor        = 7 // vendor specific
	StatusCRDMask    = Status(0x1800)
	StatusMore       = Status(0x2000) // M: more status information in the error log
	StatusDNR        = Status(0x4000) // DNR: do not retry
	statusCodeMask   = Status(0x07FF) // SCT and SC
	statusCRDShift   = 11
	statusPhaseShift = 1
)

// Generic command status (SCT 0; NVMe Base 2.0 Figure 102, Linux NVME_SC_*).
const (
	StatusSuccess                    Status = 0x000
	StatusInvalidOpcode              Status = 0x001
	StatusInvalidField               Status = 0x002
	StatusCIDConflict                Status = 0x003
	StatusDataTransferError          Status = 0x004
	StatusPowerLoss                  Status = 0x005 // commands aborted due to power loss notification
	StatusInternalError              Status = 0x006
	StatusAbortRequested             Status = 0x007
	StatusAbortSQDeleted             Status = 0x008
	StatusAbortFusedFail             Status = 0x009
	StatusAbortFusedMissing          Status = 0x00A
	StatusInvalidNamespace           Status = 0x00B // invalid namespace or format
	StatusCommandSequenceError       Status = 0x00C
	StatusSGLInvalidLastSegment      Status = 0x00D
	StatusSGLInvalidCount            Status = 0x00E // invalid number of SGL descriptors
	StatusSGLInvalidData             Status = 0x00F // data SGL length invalid
	StatusSGLInvalidMetadata         Status = 0x010 // metadata SGL length invalid
	StatusSGLInvalidType             Status = 0x011 // SGL descriptor type invalid
	StatusCMBInvalidUse              Status = 0x012
	StatusPRPInvalidOffset           Status = 0x013
	StatusAtomicWriteUnitExceeded    Status = 0x014
	StatusOperationDenied            Status = 0x015
	StatusSGLInvalidOffset           Status = 0x016
	StatusSGLInvalidSubtype          Status = 0x017 // NVMe 1.3; reserved since 1.4
	StatusHostIDInconsistentFormat   Status = 0x018
	StatusKeepAliveExpired           Status = 0x019
	StatusKeepAliveInvalid           Status = 0x01A
	StatusAbortPreempt               Status = 0x01B
	StatusSanitizeFailed             Status = 0x01C
	StatusSanitizeInProgress         Status = 0x01D
	StatusSGLInvalidGranularity      Status = 0x01E
	StatusCommandNotSupportedCMB     Status = 0x01F
	StatusNamespaceWriteProtected    Status = 0x020
	StatusCommandInterrupted         Status = 0x021
	StatusTransientTransportError    Status = 0x022
	StatusCommandProhibitedLockdown  Status = 0x023
	StatusAdminCommandMediaNotReady  Status = 0x024
	StatusInvalidIOCommandSet        Status = 0x02C
	StatusLBAOutOfRange              Status = 0x080
	StatusCapacityExceeded           Status = 0x081
	StatusNamespaceNotReady          Status = 0x082
	StatusReservationConflict        Status = 0x083
	StatusFormatInProgress           Status = 0x084
	StatusInvalidValueSize           Status = 0x085
	StatusInvalidKeyTag              Status = 0x086
	StatusHostDispersedNSUnsupported Status = 0x087
)

// Command specific status (SCT 1; NVMe Base 2.0 Figure 103).
const (
	StatusInvalidCQ                    Status = 0x100 // completion queue invalid
	StatusInvalidQID                   Status = 0x101 // invalid queue identifier
	StatusInvalidQueueSize             Status = 0x102
	StatusAbortLimitExceeded           Status = 0x103
	StatusAsyncEventLimitExceeded      Status = 0x105
	StatusInvalidFirmwareSlot          Status = 0x106
	StatusInvalidFirmwareImage         Status = 0x107
	StatusInvalidInterruptVector       Status = 0x108
	StatusInvalidLogPage               Status = 0x109
	StatusInvalidFormat                Status = 0x10A
	StatusFWNeedsConventionalReset     Status = 0x10B
	StatusInvalidQueueDeletion         Status = 0x10C
	StatusFeatureNotSaveable           Status = 0x10D
	StatusFeatureNotChangeable         Status = 0x10E
	StatusFeatureNotNamespaceSpecific  Status = 0x10F
	StatusFWNeedsSubsystemReset        Status = 0x110
	StatusFWNeedsReset                 Status = 0x111
	StatusFWNeedsMaxTime               Status = 0x112
	StatusFWActivationProhibited       Status = 0x113
	StatusOverlappingRange             Status = 0x114
	StatusNSInsufficientCapacity       Status = 0x115
	StatusNSIDUnavailable              Status = 0x116
	StatusNSAlreadyAttached            Status = 0x118
	StatusNSIsPrivate                  Status = 0x119
	StatusNSNotAttached                Status = 0x11A
	StatusThinProvisioningNotSupported Status = 0x11B
	StatusControllerListInvalid        Status = 0x11C
	StatusSelfTestInProgress           Status = 0x11D
	StatusBootPartitionWriteProhibited Status = 0x11E
	StatusInvalidControllerID          Status = 0x11F
	StatusInvalidSecondaryCtrlState    Status = 0x120
	StatusInvalidCtrlResourceCount     Status = 0x121
	StatusInvalidResourceID            Status = 0x122
	StatusSanitizeProhibitedPMR        Status = 0x123
	StatusANAGroupIDInvalid            Status = 0x124
	StatusANAAttachFailed              Status = 0x125
)

// I/O command set specific status (SCT 1, SC 0x80..0xBF). The same values
// mean different things for NVM commands and for Fabrics commands.
const (
	// NVM command set (NVMe NVM Command Set 1.0 Figure 18).
	StatusConflictingAttributes Status = 0x180 // Dataset Management, Read, Write
	StatusInvalidProtectionInfo Status = 0x181
	StatusWriteToReadOnly       Status = 0x182 // attempted write to read only range

	// Fabrics commands (NVMe-oF 1.1 Figure 27; Linux NVME_SC_CONNECT_*).
	StatusConnectIncompatibleFormat Status = 0x180 // Connect RECFMT not supported
	StatusConnectControllerBusy     Status = 0x181
	StatusConnectInvalidParameters  Status = 0x182 // DW0 holds IATTR/IPO, see ConnectInvalidParamResult
	StatusConnectRestartDiscovery   Status = 0x183
	StatusConnectInvalidHost        Status = 0x184 // host not allowed to connect
	StatusDiscoverRestart           Status = 0x190
	StatusAuthRequired              Status = 0x191
)

// Media and data integrity errors (SCT 2; NVMe Base 2.0 Figure 104).
const (
	StatusWriteFault             Status = 0x280
	StatusUnrecoveredReadError   Status = 0x281
	StatusGuardCheckError        Status = 0x282
	StatusAppTagCheckError       Status = 0x283
	StatusRefTagCheckError       Status = 0x284
	StatusCompareFailure         Status = 0x285
	StatusAccessDenied           Status = 0x286
	StatusDeallocatedOrUnwritten Status = 0x287
)

// Path related status (SCT 3; NVMe Base 2.0 Figure 105).
const (
	StatusInternalPathError   Status = 0x300
	StatusANAPersistentLoss   Status = 0x301
	StatusANAInaccessible     Status = 0x302
	StatusANATransition       Status = 0x303
	StatusControllerPathError Status = 0x360
	StatusHostPathError       Status = 0x370
	StatusHostAbortedCommand  Status = 0x371
)

// StatusFromWire returns the Status of a CQE status field as sent on the
// wire (bit 0 is the phase tag).
func StatusFromWire(w uint16) Status { return Status(w >> statusPhaseShift) }

// Wire returns the CQE status field for s with phase tag 0.
func (s Status) Wire() uint16 { return uint16(s) << statusPhaseShift }

// sc returns the status code (bits 7..0).
func (s Status) sc() uint8 { return uint8(s) }

// SCT returns the status code type (bits 10..8).
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// CRD returns the command retry delay index (0 = none, 1..3 select CRDT1..3).
func (s Status) CRD() uint8 { return uint8(s>>statusCRDShift) & 3 }

// More reports the M bit: the Error Information log has more details.
func (s Status) More() bool { return s&StatusMore != 0 }

// DNR reports the Do Not Retry bit.
func (s Status) DNR() bool { return s&StatusDNR != 0 }

// Code returns s without CRD, More and DNR: only SCT and SC, for comparison
// against the named constants.
func (s Status) Code() Status { return s & statusCodeMask }

// withDNR returns s with the Do Not Retry bit set.
func (s Status) withDNR() Status { return s | StatusDNR }

// withCRD returns s with its command retry delay index set to crd (0..3).
func (s Status) withCRD(crd uint8) Status {
	return s&^StatusCRDMask | Status(crd&3)<<statusCRDShift
}

// IsSuccess reports whether s is a successful completion (SCT and SC zero).
func (s Status) IsSuccess() bool { return s.Code() == StatusSuccess }

// Err returns nil for success and s otherwise, to turn a completion status
// into a Go error.
func (s Status) Err() error {
	if s.IsSuccess() {
		return nil
	}
	return s
}

// Error formats the status like "nvme status 0x4002: invalid field in
// command (DNR)".
func (s Status) Error() string {
	var b strings.Builder
	b.WriteString("nvme status 0x")
	h := strconv.FormatUint(uint64(s), 16)
	for i := len(h); i < 3; i++ {
		b.WriteByte('0')
	}
	b.WriteString(h)
	b.WriteString(": ")
	b.WriteString(s.Name())
	var flags []string
	if s.DNR() {
		flags = append(flags, "DNR")
	}
	if s.More() {
		flags = append(flags, "more")
	}
	if crd := s.CRD(); crd != 0 {
		flags = append(flags, "CRD "+strconv.Itoa(int(crd)))
	}
	if len(flags) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(flags, ", "))
		b.WriteByte(')')
	}
	return b.String()
}

// String is the same as Error.
func (s Status) String() string { return s.Error() }

// Name returns the description of s's SCT and SC, e.g. "invalid field in
// command". Codes whose meaning depends on the command (SCT 1, SC 0x80..0x84)
// list both readings, NVM first.
func (s Status) Name() string {
	if n, ok := statusNames[s.Code()]; ok {
		return n
	}
	switch s.SCT() {
	case SCTGeneric:
		return "unknown generic status"
	case SCTCommand:
		return "unknown command specific status"
	case SCTMedia:
		return "unknown media error"
	case SCTPath:
		return "unknown path error"
	case SCTVendor:
		return "vendor specific status"
	}
	return "reserved status code type"
}

var statusNames = map[Status]string{
	StatusSuccess:                      "success",
	StatusInvalidOpcode:                "invalid command opcode",
	StatusInvalidField:                 "invalid field in command",
	StatusCIDConflict:                  "command ID conflict",
	StatusDataTransferError:            "data transfer error",
	StatusPowerLoss:                    "commands aborted due to power loss notification",
	StatusInternalError:                "internal error",
	StatusAbortRequested:               "command abort requested",
	StatusAbortSQDeleted:               "command aborted due to SQ deletion",
	StatusAbortFusedFail:               "command aborted due to failed fused command",
	StatusAbortFusedMissing:            "command aborted due to missing fused command",
	StatusInvalidNamespace:             "invalid namespace or format",
	StatusCommandSequenceError:         "command sequence error",
	StatusSGLInvalidLastSegment:        "invalid SGL segment descriptor",
	StatusSGLInvalidCount:              "invalid number of SGL descriptors",
	StatusSGLInvalidData:               "data SGL length invalid",
	StatusSGLInvalidMetadata:           "metadata SGL length invalid",
	StatusSGLInvalidType:               "SGL descriptor type invalid",
	StatusCMBInvalidUse:                "invalid use of controller memory buffer",
	StatusPRPInvalidOffset:             "PRP offset invalid",
	StatusAtomicWriteUnitExceeded:      "atomic write unit exceeded",
	StatusOperationDenied:              "operation denied",
	StatusSGLInvalidOffset:             "SGL offset invalid",
	StatusSGLInvalidSubtype:            "SGL descriptor subtype invalid",
	StatusHostIDInconsistentFormat:     "host identifier inconsistent format",
	StatusKeepAliveExpired:             "keep alive timer expired",
	StatusKeepAliveInvalid:             "keep alive timeout invalid",
	StatusAbortPreempt:                 "command aborted due to preempt and abort",
	StatusSanitizeFailed:               "sanitize failed",
	StatusSanitizeInProgress:           "sanitize in progress",
	StatusSGLInvalidGranularity:        "SGL data block granularity invalid",
	StatusCommandNotSupportedCMB:       "command not supported for queue in CMB",
	StatusNamespaceWriteProtected:      "namespace is write protected",
	StatusCommandInterrupted:           "command interrupted",
	StatusTransientTransportError:      "transient transport error",
	StatusCommandProhibitedLockdown:    "command prohibited by command and feature lockdown",
	StatusAdminCommandMediaNotReady:    "admin command media not ready",
	StatusInvalidIOCommandSet:          "invalid I/O command set",
	StatusLBAOutOfRange:                "LBA out of range",
	StatusCapacityExceeded:             "capacity exceeded",
	StatusNamespaceNotReady:            "namespace not ready",
	StatusReservationConflict:          "reservation conflict",
	StatusFormatInProgress:             "format in progress",
	StatusInvalidValueSize:             "invalid value size",
	StatusInvalidKeyTag:                "invalid key tag",
	StatusHostDispersedNSUnsupported:   "host dispersed namespace support not enabled",
	StatusInvalidCQ:                    "completion queue invalid",
	StatusInvalidQID:                   "invalid queue identifier",
	StatusInvalidQueueSize:             "invalid queue size",
	StatusAbortLimitExceeded:           "abort command limit exceeded",
	StatusAsyncEventLimitExceeded:      "asynchronous event request limit exceeded",
	StatusInvalidFirmwareSlot:          "invalid firmware slot",
	StatusInvalidFirmwareImage:         "invalid firmware image",
	StatusInvalidInterruptVector:       "invalid interrupt vector",
	StatusInvalidLogPage:               "invalid log page",
	StatusInvalidFormat:                "invalid format",
	StatusFWNeedsConventionalReset:     "firmware activation requires conventional reset",
	StatusInvalidQueueDeletion:         "invalid queue deletion",
	StatusFeatureNotSaveable:           "feature identifier not saveable",
	StatusFeatureNotChangeable:         "feature not changeable",
	StatusFeatureNotNamespaceSpecific:  "feature not namespace specific",
	StatusFWNeedsSubsystemReset:        "firmware activation requires NVM subsystem reset",
	StatusFWNeedsReset:                 "firmware activation requires controller level reset",
	StatusFWNeedsMaxTime:               "firmware activation requires maximum time violation",
	StatusFWActivationProhibited:       "firmware activation prohibited",
	StatusOverlappingRange:             "overlapping range",
	StatusNSInsufficientCapacity:       "namespace insufficient capacity",
	StatusNSIDUnavailable:              "namespace identifier unavailable",
	StatusNSAlreadyAttached:            "namespace already attached",
	StatusNSIsPrivate:                  "namespace is private",
	StatusNSNotAttached:                "namespace not attached",
	StatusThinProvisioningNotSupported: "thin provisioning not supported",
	StatusControllerListInvalid:        "controller list invalid",
	StatusSelfTestInProgress:           "device self-test in progress",
	StatusBootPartitionWriteProhibited: "boot partition write prohibited",
	StatusInvalidControllerID:          "invalid controller identifier",
	StatusInvalidSecondaryCtrlState:    "invalid secondary controller state",
	StatusInvalidCtrlResourceCount:     "invalid number of controller resources",
	StatusInvalidResourceID:            "invalid resource identifier",
	StatusSanitizeProhibitedPMR:        "sanitize prohibited while persistent memory region is enabled",
	StatusANAGroupIDInvalid:            "ANA group identifier invalid",
	StatusANAAttachFailed:              "ANA attach failed",
	StatusConflictingAttributes:        "conflicting attributes / connect incompatible format",
	StatusInvalidProtectionInfo:        "invalid protection information / connect controller busy",
	StatusWriteToReadOnly:              "attempted write to read only range / connect invalid parameters",
	0x183:                              "connect restart discovery",
	StatusConnectInvalidHost:           "connect invalid host",
	StatusDiscoverRestart:              "discover restart",
	StatusAuthRequired:                 "authentication required",
	StatusWriteFault:                   "write fault",
	StatusUnrecoveredReadError:         "unrecovered read error",
	StatusGuardCheckError:              "end-to-end guard check error",
	StatusAppTagCheckError:             "end-to-end application tag check error",
	StatusRefTagCheckError:             "end-to-end reference tag check error",
	StatusCompareFailure:               "compare failure",
	StatusAccessDenied:                 "access denied",
	StatusDeallocatedOrUnwritten:       "deallocated or unwritten logical block",
	StatusInternalPathError:            "internal path error",
	StatusANAPersistentLoss:            "asymmetric access persistent loss",
	StatusANAInaccessible:              "asymmetric access inaccessible",
	StatusANATransition:                "asymmetric access transition",
	StatusControllerPathError:          "controller pathing error",
	StatusHostPathError:                "host pathing error",
	StatusHostAbortedCommand:           "command aborted by host",
}

// StatusFromError returns the status a controller should complete a command
// with for err: success for nil, the Status found in err's chain (see
// errors.As) if there is one, and StatusInternalError for anything else.
func StatusFromError(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var s Status
	if errors.As(err, &s) {
		return s
	}
	return StatusInternalError
}
