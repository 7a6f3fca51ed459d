package nvmeof

import (
	"testing"
)

// Every decoder of network bytes must return an error, never panic, for
// every truncated prefix of a valid input.
func TestTruncatedPrefixes(t *testing.T) {
	disclog := loadGolden(t, "disclog.hex")
	ana := loadGolden(t, "log-ana.hex")
	anaLen := ANALogSize([]ANAGroup{{NSIDs: []uint32{1}}}, false)
	dsm := make([]byte, 3*DSMRangeSize)
	var ts [TimestampSize]byte
	for _, tc := range []struct {
		name  string
		valid []byte
		parse func([]byte) error
	}{
		{"SQE", loadGolden(t, "sqe-read-4k.hex"), func(b []byte) error { _, err := ParseSQE(b); return err }},
		{"CQE", loadGolden(t, "cqe-read.hex"), func(b []byte) error { _, err := ParseCQE(b); return err }},
		{"SGL", loadGolden(t, "sqe-read-4k.hex")[24:40], func(b []byte) error { _, err := ParseSGL(b); return err }},
		{"ConnectData", loadGolden(t, "connectdata-io.hex"), func(b []byte) error { _, err := ParseConnectData(b); return err }},
		{"DiscoveryLog", disclog, func(b []byte) error { _, err := ParseDiscoveryLog(b); return err }},
		{"DiscoveryLogHeader", disclog[:DiscoveryHeaderMin], func(b []byte) error { _, _, err := ParseDiscoveryLogHeader(b); return err }},
		{"DiscoveryLogEntry", disclog[1024:2048], func(b []byte) error { _, err := ParseDiscoveryLogEntry(b); return err }},
		{"DiscoveryLogEntries", disclog[1024:2048], func(b []byte) error { _, err := ParseDiscoveryLogEntries(b, nil); return err }},
		{"DSMRanges", dsm, func(b []byte) error { _, err := ParseDSMRanges(b, 3); return err }},
		{"NSDescriptors", loadGolden(t, "nsdesc.hex"), func(b []byte) error { _, err := ParseNSDescriptors(b); return err }},
		{"NSList", loadGolden(t, "nslist.hex"), func(b []byte) error { _, err := ParseNSList(b, nil); return err }},
		{"ChangedNSList", make([]byte, ChangedNSListSize), func(b []byte) error { _, _, err := ParseChangedNSList(b, nil); return err }},
		{"ANALog", ana[:anaLen], func(b []byte) error { _, err := ParseANALog(b); return err }},
		{"IdentifyController", loadGolden(t, "idctrl-nvm.hex"), func(b []byte) error { _, err := ParseIdentifyController(b); return err }},
		{"IdentifyNamespace", loadGolden(t, "idns.hex"), func(b []byte) error { _, err := ParseIdentifyNamespace(b); return err }},
		{"IdentifyNSIndependent", make([]byte, IdentifyDataSize), func(b []byte) error { _, err := ParseIdentifyNSIndependent(b); return err }},
		{"IdentifyControllerNVM", loadGolden(t, "idctrl-nvmcs.hex"), func(b []byte) error { _, err := ParseIdentifyControllerNVM(b); return err }},
		{"IdentifyNamespaceNVM", make([]byte, IdentifyDataSize), func(b []byte) error { _, err := ParseIdentifyNamespaceNVM(b); return err }},
		{"SMARTLog", loadGolden(t, "log-smart.hex"), func(b []byte) error { _, err := ParseSMARTLog(b); return err }},
		{"ErrorLogEntry", make([]byte, ErrorLogEntrySize), func(b []byte) error { _, err := ParseErrorLogEntry(b); return err }},
		{"FirmwareSlotLog", make([]byte, FirmwareSlotLogSize), func(b []byte) error { _, err := ParseFirmwareSlotLog(b); return err }},
		{"CommandEffectsLog", loadGolden(t, "log-effects.hex"), func(b []byte) error { _, err := ParseCommandEffectsLog(b); return err }},
		{"HostBehavior", make([]byte, HostBehaviorSize), func(b []byte) error { _, err := ParseHostBehavior(b); return err }},
		{"Timestamp", ts[:], func(b []byte) error { _, _, _, err := DecodeTimestamp(b); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.parse(tc.valid); err != nil {
				t.Fatalf("valid input rejected: %v", err)
			}
			for n := 0; n < len(tc.valid); n++ {
				// A fresh copy so a decoder cannot read past the prefix
				// into the rest of the valid bytes.
				p := append([]byte(nil), tc.valid[:n]...)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("prefix of %d bytes: panic %v", n, r)
						}
					}()
					if err := tc.parse(p); err == nil {
						t.Fatalf("prefix of %d bytes accepted", n)
					}
				}()
			}
		})
	}
}
