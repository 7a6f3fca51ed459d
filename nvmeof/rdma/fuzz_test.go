package rdma

import (
	"bytes"
	"testing"
)

// FuzzCMRequest checks that any private data decodes without panicking and
// that what decodes re-encodes to the same 32 bytes.
func FuzzCMRequest(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0x20, 0, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add((&CMRequest{QID: 1, HRQSize: 128, HSQSize: 127}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseCMRequest(b)
		if err != nil {
			return
		}
		enc := r.Append(nil)
		if !bytes.Equal(enc[:10], b[:10]) {
			t.Fatalf("re-encode %x want %x", enc[:10], b[:10])
		}
	})
}

// FuzzCMAcceptReject decodes controller answers as a host does.
func FuzzCMAcceptReject(f *testing.F) {
	f.Add((&CMAccept{CRQSize: 32}).Append(nil))
	f.Add(AppendCMReject(nil, CMRejectInvalidHSQSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseCMAccept(b)
		if st, err := ParseCMReject(b); err == nil {
			_ = st.String()
		}
	})
}
