package wire

import (
	"bytes"
	"testing"
)

// The fuzz targets check that no input makes a decoder panic and that what
// decodes re-encodes to the same bytes. Seeds: testdata/fuzz/<Name>/ plus
// the golden frames added here.

func FuzzMPAFrame(f *testing.F) {
	for _, name := range []string{"mpa-req-nvme-discover-conn0.bin", "mpa-probe-kernel-target-qid1.bin"} {
		f.Add(readGolden(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ParseMPAFrame(b, MPAMaxPrivateData)
		if err != nil {
			return
		}
		if n > len(b) || n != fr.WireLen() {
			t.Fatalf("n=%d len=%d wire=%d", n, len(b), fr.WireLen())
		}
		if enc := fr.Append(nil); !bytes.Equal(enc, b[:n]) {
			// Only the 14-bit masks can lose information: none exists in
			// the encoding, so a mismatch is a bug.
			t.Fatalf("re-encode %x want %x", enc, b[:n])
		}
	})
}

func FuzzHeader(f *testing.F) {
	var b [UntaggedHeaderLen + ReadRequestLen]byte
	PutUntaggedHeader(b[:], OpSend, true, 0, 0, 1, 0, 64)
	f.Add(bytes.Clone(b[:]))
	PutTaggedHeader(b[:], OpWrite, false, 0x1234500, 0xffff888000001000, 1432)
	f.Add(bytes.Clone(b[:TaggedHeaderLen]))
	PutUntaggedHeader(b[:], OpReadRequest, true, 0, 1, 1, 0, ReadRequestLen)
	(&ReadRequest{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}).Encode(b[UntaggedHeaderLen:])
	f.Add(bytes.Clone(b[:]))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		n, err := DecodeHeader(b, &h)
		if err != nil {
			return
		}
		if h.PayloadLen() < 0 {
			t.Fatalf("negative payload %d", h.PayloadLen())
		}
		if h.Check() == nil && h.Reserved == 0 {
			var enc [UntaggedHeaderLen]byte
			if m := h.Encode(enc[:]); m != n || !bytes.Equal(enc[:n], b[:n]) {
				t.Fatalf("re-encode %x want %x", enc[:m], b[:n])
			}
		}
		if h.Opcode == OpReadRequest {
			_, _ = DecodeReadRequest(b[n:])
		}
	})
}

func FuzzTerminate(f *testing.F) {
	f.Add([]byte{0x12, 0x03, 0xC0, 0, 0, 118, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0})
	f.Add([]byte{0x21, 0x03, 0x03, 0, 0, 118})
	f.Add([]byte{0x20, 0x07, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, _, err := DecodeTerminateAny(b)
		if err != nil {
			return
		}
		_ = tm.Cause.String()
		_ = tm.AppendPayload(nil)
	})
}
