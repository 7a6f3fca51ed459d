package iwarp

import (
	"bytes"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// TestLargePayloadRestPlacedStraight: the part of a large RDMA Write's
// payload (at least rxDirectMin) that has not arrived when its header is
// read goes straight into the registered memory, and that read stops at
// the next FPDU's header, so the small Write behind it is not pulled into
// the read-ahead buffer either (rx.go, issue 25). A raw peer sends the
// header and the first 1 KiB, waits until the QP has taken them, then the
// rest, a 4 KiB Write and a Send in one write. Counts of bytes, not
// timings: whatever sizes the reads return, the rest of the large payload
// is read straight, and at most a tail's worth of the next FPDU is copied.
func TestLargePayloadRestPlacedStraight(t *testing.T) {
	if rxCopyAll || rxWide {
		t.Skip("NVMETD_RX_PLACEMENT is set: this checks the default placement rule")
	}
	const large, first, small = 60 << 10, 1 << 10, 4 << 10
	ln, ch := acceptOne(t, nil, QPAttr{}, 2)
	p, _, err := dialRaw(t, ln.Addr().String(), stdRequest())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-ch
	if srv == nil {
		t.Fatal("accept failed")
	}
	mem := make([]byte, large+small)
	mr, err := srv.pd.RegisterMemory(mem, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xA5}, large)
	frame := p.fpdu(tagged(wire.OpWrite, true, mr.STag(), mr.IOVA(), big))
	cut := wire.TaggedHeaderLen + first
	p.send(frame[:cut])
	deadline := time.Now().Add(hang)
	for {
		st := srv.qp.Stats()
		if st.PayloadCopied+st.PayloadDirect == first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first %d payload bytes not taken: %+v", first, st)
		}
		time.Sleep(time.Millisecond)
	}
	rest := append([]byte(nil), frame[cut:]...)
	rest = append(rest, p.fpdu(tagged(wire.OpWrite, true, mr.STag(), mr.IOVA()+large, bytes.Repeat([]byte{0x5A}, small)))...)
	rest = append(rest, p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("done")))...)
	p.send(rest)
	if wc := wait(t, srv.rcq); wc.Status != WCSuccess {
		t.Fatalf("send: %+v", wc)
	}
	if !bytes.Equal(mem[:large], big) || !bytes.Equal(mem[large:], bytes.Repeat([]byte{0x5A}, small)) {
		t.Fatal("writes not placed")
	}
	st := srv.qp.Stats()
	t.Logf("payload bytes: %d copied, %d straight", st.PayloadCopied, st.PayloadDirect)
	if total := st.PayloadCopied + st.PayloadDirect; total != large+small+4 {
		t.Fatalf("%d payload bytes counted, want %d", total, large+small+4)
	}
	if st.PayloadDirect < large-first {
		t.Errorf("%d bytes straight, want at least the large payload's rest (%d)", st.PayloadDirect, large-first)
	}
	// Copied: the first 1 KiB, what of the 4 KiB Write's payload the
	// tail iovec took after its header, and the Send's 4 bytes.
	if max := uint64(first + rxTail + 4); st.PayloadCopied > max {
		t.Errorf("%d bytes copied, want at most %d: the read of the large payload's rest did not stop at the next header", st.PayloadCopied, max)
	}
}
