package target

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/pcapstream"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// TestTraceHostFromConnect (issue 23.11): a trace by host NQN started
// before the host connects has each of its queues from the first FPDU on,
// the Connect capsule included (before, only the answers: the queue was
// tapped after its Connect named the host); another host's queues are not
// in the trace.
func TestTraceHostFromConnect(t *testing.T) {
	cfg := testConfig(t, memNS(1, "4MiB"))
	cfg.Subsystems[0].AllowAnyHost = true
	cfg.Transport.CRC = "offered"
	s := startServer(t, cfg)
	tg := &Target{s: s}
	path := filepath.Join(t.TempDir(), "trace.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.StartTrace(TraceSpec{Host: testHostNQN, MaxBytes: 1 << 20, Duration: time.Hour}, f); err != nil {
		t.Fatal(err)
	}
	other, err := connectHost(t, portAddr(s, 1), testSubNQN, "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555", testKATO)
	if err != nil {
		t.Fatal(err)
	}
	other.setup(1)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	if err := do(t, h.io[0], rw(true, 1, 0, pattern(4096, 2), 512)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.getFeature(0x07); err != nil {
		t.Fatal(err)
	}
	st, err := tg.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	if st.Queues != 2 {
		t.Errorf("%d queues traced, want 2 (the host's admin and I/O queue, not the other host's)", st.Queues)
	}
	conns, err := pcapstream.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 {
		t.Fatalf("%d connections in the trace, want 2", len(conns))
	}
	for _, c := range conns {
		s := c.Initiator
		_, n, err := wire.ParseMPAFrame(s.Data, 1024)
		if err != nil {
			t.Fatalf("%v: MPA frame: %v", s, err)
		}
		// The host's first FPDU is its Connect capsule: a Send carrying
		// an SQE with the Fabrics opcode (0x7F) and FCTYPE Connect (0x01).
		b := s.Data[n:]
		if len(b) < 2 {
			t.Fatalf("%v: no FPDU after the MPA exchange", s)
		}
		l := wire.FPDULen(int(b[0])<<8 | int(b[1]))
		if l > len(b) || wire.GetCRC(b[l-4:l]) != wire.CRC(b[:l-4]) {
			t.Fatalf("%v: the first FPDU (%d bytes of %d) is not whole", s, l, len(b))
		}
		// MPA header 2, DDP/RDMAP untagged header 18: the SQE follows.
		if sqe := b[2+18:]; len(sqe) < 5 || sqe[0] != 0x7F || sqe[4] != 0x01 {
			t.Errorf("%v: the first FPDU is not a Connect capsule: % x", s, b[:min(len(b), 40)])
		}
	}
	tshark(t, path, "Command: Fabrics Connect", "Connect QID: 1", "Queue: I/O 1", "Command: Write\n")
}
