package nvmeof

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/nvmetd/nvmetd/internal/testing/fuzzseed"
)

// Fuzz targets for the decoders of network bytes not covered next to their
// unit tests (FuzzSGL, FuzzConnectData, FuzzDSMRanges, FuzzStatus,
// FuzzNQN). Each seeds from the golden vectors; testdata/fuzz/<Name> holds
// the same seeds as files (rewritten by TestWriteFuzzSeeds -update).

// pad4096 returns b padded with zeros (or cut) to a 4096-byte Identify or
// log buffer, so the fuzzer explores the structure rather than its length.
func pad4096(b []byte) []byte {
	p := make([]byte, 4096)
	copy(p, b)
	return p
}

// trimZeros drops trailing zero bytes: the seeds of targets that pad their
// input stay small, which keeps the fuzzer's minimization fast.
func trimZeros(b []byte) []byte { return bytes.TrimRight(b, "\x00") }

func FuzzSQE(f *testing.F) {
	for _, src := range goldenSources {
		if src.Len == 64 {
			f.Add(loadGolden(f, src.File))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSQE(b)
		if err != nil {
			if len(b) >= SQESize {
				t.Fatal(err)
			}
			return
		}
		// A controller's dispatch: classify, decode the data pointer and the
		// command specific fields; nothing may panic.
		_ = OpcodeName(0, s) + OpcodeName(1, s)
		_ = s.DataDirection().String()
		if d, err := s.DecodeSGL1(); err == nil {
			_ = d.CheckInCapsule(len(b) - SQESize)
		} else if !StatusFromError(err).DNR() {
			t.Fatalf("SGL error without DNR: %v", err)
		}
		c := s.ConnectCmd()
		_ = c.QueueSize() + int(c.KATO()) + int(c.cattr())
		_ = s.PropertyGetCmd().size() + s.PropertySetCmd().Size()
		_ = s.PropertySetCmd().Value()
		g := s.GetLogPageCmd()
		if g.NumBytes() < 4 || g.NumBytes() > 1<<34 {
			t.Fatalf("NumBytes %d", g.NumBytes())
		}
		_ = s.IdentifyCmd().CNS()
		_ = s.FeaturesCmd().Value()
		rw := s.RWCmd()
		_, _ = rw.LastLBA()
		if rw.Blocks() < 1 || rw.Blocks() > MaxBlocksPerCommand {
			t.Fatalf("Blocks %d", rw.Blocks())
		}
		if n := s.DSMCmd().NumRanges(); n < 1 || n > MaxDSMRanges {
			t.Fatalf("NumRanges %d", n)
		}
		_ = s.WriteZeroesCmd().deac()
		_ = s.abortCmd().abortCID()
		_ = s.AuthCmd().Length()
		var cq CQE
		cq.Complete(s, 1, 2, 3, StatusInvalidField|StatusDNR)
		if cq.CID() != s.CID() || cq.Status() != StatusInvalidField|StatusDNR {
			t.Fatal("completion")
		}
	})
}

func FuzzDiscoveryLog(f *testing.F) {
	f.Add(loadGolden(f, "disclog.hex"))
	f.Add(loadGolden(f, "disclog-hdr.hex"))
	f.Add(loadGolden(f, "disclog-hdr.hex")[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		if g, n, err := ParseDiscoveryLogHeader(b); err == nil {
			if len(b) < DiscoveryHeaderMin {
				t.Fatal("short header accepted")
			}
			_ = g + n
		}
		if len(b) >= DiscoveryLogHeaderSize {
			_, _ = ParseDiscoveryLogEntries(b[DiscoveryLogHeaderSize:], nil)
		}
		l, err := ParseDiscoveryLog(b)
		if err != nil {
			return
		}
		if uint64(len(l.Entries)) != l.NumRec || len(b) < DiscoveryLogSize(len(l.Entries)) {
			t.Fatalf("NUMREC %d with %d entries in %d bytes", l.NumRec, len(l.Entries), len(b))
		}
		// Round trip: entries whose strings fit re-encode to the same fields.
		enc, err := AppendDiscoveryLog(nil, l.GenCtr, l.Entries)
		if err != nil {
			return // a field filled to its last byte (no NUL) cannot be re-encoded
		}
		l2, err := ParseDiscoveryLog(enc)
		if err != nil || l2.GenCtr != l.GenCtr || !slices.Equal(l2.Entries, l.Entries) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzNSDescriptors(f *testing.F) {
	f.Add(trimZeros(loadGolden(f, "nsdesc.hex")))
	var all [IdentifyDataSize]byte
	EncodeNSDescriptors(all[:], NSIdentifiers{HasEUI64: true, HasNGUID: true, HasUUID: true, HasCSI: true, EUI64: [8]byte{1}, CSI: 2})
	f.Add(all[:64])
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseNSDescriptors(b); err == nil && len(b) < IdentifyDataSize {
			t.Fatal("short list accepted")
		}
		ids, err := ParseNSDescriptors(pad4096(b))
		if err != nil {
			return
		}
		var enc [IdentifyDataSize]byte
		if _, err := EncodeNSDescriptors(enc[:], ids); err != nil {
			t.Fatal(err)
		}
		ids2, err := ParseNSDescriptors(enc[:])
		if err != nil || ids2 != ids {
			t.Fatalf("round trip %+v -> %+v (%v)", ids, ids2, err)
		}
	})
}

func FuzzNSList(f *testing.F) {
	f.Add(loadGolden(f, "nslist.hex")[:64])
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := ParseNSList(pad4096(b), nil)
		if err != nil {
			return
		}
		var enc [IdentifyDataSize]byte
		if n := EncodeNSList(enc[:], ids, 0); n != len(ids) {
			t.Fatalf("re-encoded %d of %d", n, len(ids))
		}
		ids2, err := ParseNSList(enc[:], nil)
		if err != nil || !slices.Equal(ids, ids2) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzChangedNSList(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 5, 0, 0, 0})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := ParseChangedNSList(b, nil); err == nil && len(b) < ChangedNSListSize {
			t.Fatal("short list accepted")
		}
		ids, over, err := ParseChangedNSList(pad4096(b), nil)
		if err != nil || over {
			return
		}
		var enc [ChangedNSListSize]byte
		EncodeChangedNSList(enc[:], ids)
		ids2, over2, err := ParseChangedNSList(enc[:], nil)
		if err != nil || over2 || !slices.Equal(ids, ids2) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzANALog(f *testing.F) {
	ana := loadGolden(f, "log-ana.hex")
	f.Add(ana[:64])
	multi, _ := AppendANALog(nil, 3, []ANAGroup{{ID: 1, State: ANAOptimized, NSIDs: []uint32{1, 2}}, {ID: 2, State: ANAChange}}, false)
	f.Add(multi)
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseANALog(b)
		if err != nil {
			return
		}
		enc, err := AppendANALog(nil, l.ChangeCount, l.Groups, false)
		if err != nil || len(enc) > len(b) || !bytes.Equal(enc, b[:len(enc)]) && !reservedDiffOnly(enc, b) {
			t.Fatalf("round trip: %v", err)
		}
		l2, err := ParseANALog(enc)
		if err != nil || fmt.Sprint(l2) != fmt.Sprint(l) {
			t.Fatalf("round trip: %+v -> %+v (%v)", l, l2, err)
		}
	})
}

// reservedDiffOnly reports whether enc and b differ only in bytes the ANA
// encoder writes as reserved zeros.
func reservedDiffOnly(enc, b []byte) bool {
	if len(b) < len(enc) {
		return false
	}
	l, err := ParseANALog(enc)
	if err != nil {
		return false
	}
	reserved := map[int]bool{}
	for i := 10; i < 16; i++ {
		reserved[i] = true
	}
	off := ANALogHeaderSize
	for _, g := range l.Groups {
		for i := 17; i < 32; i++ {
			reserved[off+i] = true
		}
		off += ANAGroupDescSize + 4*len(g.NSIDs)
	}
	for i := range enc {
		if enc[i] != b[i] && !reserved[i] {
			return false
		}
	}
	return true
}

func FuzzIdentifyController(f *testing.F) {
	f.Add(trimZeros(loadGolden(f, "idctrl-nvm.hex")))
	f.Add(trimZeros(loadGolden(f, "idctrl-disc.hex")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseIdentifyController(b); err == nil && len(b) < IdentifyDataSize {
			t.Fatal("short data accepted")
		}
		c, _ := ParseIdentifyController(pad4096(b))
		// What an initiator does with it.
		_ = c.CheckFabrics(c.CNTLID(), c.CNTRLTYPE() == CntrlTypeDiscovery)
		_ = c.String()
		if n := c.InlineDataSize(); n < 0 {
			t.Fatalf("inline size %d", n)
		}
		if n := c.MaxTransferSize(); n < 0 {
			t.Fatalf("max transfer %d", n)
		}
		for i := 0; i < NumPowerStates; i++ {
			_ = c.PSD(i).mp()
		}
		_ = c.tnvmcap().String() + c.VER().String()
		// Setters and getters agree on every string field.
		var e IdentifyController
		e.SetSUBNQN(c.SUBNQN())
		if e.SUBNQN() != c.SUBNQN() && len(c.SUBNQN()) < NQNFieldSize {
			t.Fatalf("SUBNQN %q", c.SUBNQN())
		}
	})
}

func FuzzIdentifyNamespace(f *testing.F) {
	f.Add(trimZeros(loadGolden(f, "idns.hex")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseIdentifyNamespace(b); err == nil && len(b) < IdentifyDataSize {
			t.Fatal("short data accepted")
		}
		n, _ := ParseIdentifyNamespace(pad4096(b))
		i := n.FormatIndex()
		if i < 0 || i >= MaxLBAFormats {
			t.Fatalf("format index %d", i)
		}
		if bs := n.blockSize(); bs != 0 && (bs < 512 || bs&(bs-1) != 0) {
			t.Fatalf("block size %d", bs)
		}
		_ = n.nvmcap().String()
	})
}

// TestWriteFuzzSeeds writes the f.Add seeds of every fuzz target as files in
// testdata/fuzz/<Name>/ (go test fuzz v1 format) with -update, and checks
// that each target has a seed directory otherwise.
func TestWriteFuzzSeeds(t *testing.T) {
	seeds := map[string][][]any{
		"FuzzSQE":                {},
		"FuzzSGL":                {},
		"FuzzConnectData":        {},
		"FuzzDiscoveryLog":       {{loadGolden(t, "disclog.hex")}, {loadGolden(t, "disclog-hdr.hex")[:20]}},
		"FuzzNSDescriptors":      {{trimZeros(loadGolden(t, "nsdesc.hex"))}},
		"FuzzNSList":             {{loadGolden(t, "nslist.hex")[:64]}},
		"FuzzChangedNSList":      {{[]byte{1, 0, 0, 0, 5, 0, 0, 0}}, {[]byte{0xFF, 0xFF, 0xFF, 0xFF}}},
		"FuzzANALog":             {{loadGolden(t, "log-ana.hex")[:64]}},
		"FuzzIdentifyController": {{trimZeros(loadGolden(t, "idctrl-nvm.hex"))}, {trimZeros(loadGolden(t, "idctrl-disc.hex"))}},
		"FuzzIdentifyNamespace":  {{trimZeros(loadGolden(t, "idns.hex"))}},
		"FuzzDSMRanges":          {{make([]byte, 48), uint8(2)}, {make([]byte, 16), uint8(0)}},
		"FuzzStatus":             {{uint16(0x8004)}, {uint16(0x8305)}},
		"FuzzNQN":                {{DiscoveryNQN}, {labHostNQN}, {labSubNQN}},
	}
	for _, src := range goldenSources {
		if src.Len == 64 {
			seeds["FuzzSQE"] = append(seeds["FuzzSQE"], []any{loadGolden(t, src.File)})
			seeds["FuzzSGL"] = append(seeds["FuzzSGL"], []any{loadGolden(t, src.File)[24:40]})
		}
		if bytes.HasPrefix([]byte(src.File), []byte("connectdata-")) {
			seeds["FuzzConnectData"] = append(seeds["FuzzConnectData"], []any{loadGolden(t, src.File)})
		}
	}
	fuzzseed.Sync(t, *update, seeds)
}
