package target

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/pcapstream"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// TestTrace takes a wire trace of a running host's queues while it does
// I/O, and checks the pcap: the streams reassemble (the synthesized MPA
// exchange, then whole FPDUs with valid CRCs from the first byte), and
// tshark (with deploy/wireshark/nvmeof-iwarp.lua) dissects iWARP MPA, DDP,
// RDMAP and the NVMe-oF capsules in it.
func TestTrace(t *testing.T) {
	cfg := testConfig(t, memNS(1, "4MiB"))
	cfg.Transport.CRC = "offered"
	s := startServer(t, cfg)
	tg := &Target{s: s}
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(2)
	buf := pattern(8192, 1)
	// Traffic before the trace: the trace starts mid-stream.
	for i := range 20 {
		if err := do(t, h.io[i%2], rw(true, 1, uint64(i)*16, buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "trace.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.StartTrace(TraceSpec{Host: testHostNQN, MaxBytes: 1 << 20, Duration: time.Hour}, f); err != nil {
		t.Fatal(err)
	}
	if err := tg.StartTrace(TraceSpec{Host: testHostNQN}, nopCloser{}); err != ErrTraceRunning {
		t.Errorf("second trace: %v, want ErrTraceRunning", err)
	}
	// Admin traffic first: a queue's last write may be on the wire (and
	// answered) a moment before its tap records it, and the trace may
	// stop in between; the I/O that follows leaves the admin queue's
	// answer long recorded.
	if _, err := h.getFeature(0x07); err != nil { // Number of Queues
		t.Fatal(err)
	}
	for i := range 10 {
		if err := do(t, h.io[i%2], rw(true, 1, uint64(i)*16, buf, 512)); err != nil {
			t.Fatal(err)
		}
		if err := do(t, h.io[i%2], rw(false, 1, uint64(i)*16, make([]byte, 8192), 512)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := tg.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Stopped || st.Reason != "stopped" || st.Queues != 3 || st.Packets == 0 {
		t.Errorf("status %+v", st)
	}
	conns, err := pcapstream.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 3 {
		t.Fatalf("%d connections in the trace, want 3 (admin and two I/O queues)", len(conns))
	}
	for i, c := range conns {
		for _, s := range []*pcapstream.Stream{c.Initiator, c.Responder} {
			f, n, err := wire.ParseMPAFrame(s.Data, 1024)
			if err != nil {
				t.Fatalf("%v: MPA frame: %v", s, err)
			}
			if f.Reply != (s == c.Responder) || (f.Reply && !f.CRC) {
				t.Errorf("%v: MPA frame %+v", s, f)
			}
			fpdus := 0
			for b := s.Data[n:]; len(b) > 0; fpdus++ {
				l := wire.FPDULen(int(b[0])<<8 | int(b[1]))
				if l > len(b) {
					t.Fatalf("%v: FPDU %d: %d bytes, %d left", s, fpdus, l, len(b))
				}
				if wire.GetCRC(b[l-4:l]) != wire.CRC(b[:l-4]) {
					t.Fatalf("%v: FPDU %d: bad CRC", s, fpdus)
				}
				b = b[l:]
			}
			// The admin queue (the first connection) answered one
			// command: its answer may lag the trace's stop (see above).
			if fpdus == 0 && (i > 0 || s == c.Initiator) {
				t.Errorf("%v (responder's: %v): no FPDUs; %d bytes, gap %d", s, s == c.Responder, len(s.Data), s.Gap)
			}
		}
	}
	tshark(t, path, "NVMe/RDMA CM Request, QID 2", "Queue: I/O 1", "Command: Read\n", "Command: Write\n", "Queue: admin", "Command: Get Features", "Status: Success")

	// A trace of an address takes new connections too, and stops itself
	// at its size limit.
	path2 := filepath.Join(t.TempDir(), "limit.pcap")
	f2, err := os.Create(path2)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	if err := tg.StartTrace(TraceSpec{Address: "127.0.0.1", MaxBytes: limit, Duration: time.Hour}, f2); err != nil {
		t.Fatal(err)
	}
	h2 := mustConnect(t, portAddr(s, 1), testSubNQN)
	h2.setup(1)
	for i := 0; ; i++ {
		if st, _ := tg.TraceStatus(); st.Stopped {
			if st.Reason != "size limit" || st.Bytes > limit {
				t.Errorf("status %+v", st)
			}
			break
		}
		if i == 10000 {
			t.Fatal("the trace did not stop at its size limit")
		}
		if err := do(t, h2.io[0], rw(true, 1, 0, buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(path2); err != nil || fi.Size() > limit {
		t.Errorf("trace file: %v, %v", fi.Size(), err)
	}
	tshark(t, path2, "Command: Write")
	_ = bytes.Equal
}

type nopCloser struct{}

func (nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopCloser) Close() error                { return nil }

// tshark dissects the trace with the Lua dissector and checks that
// iWARP's layers and NVMe-oF capsules are in the output.
func tshark(t *testing.T, path string, want ...string) {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (test/deps.sh installs it): the trace was checked by reassembly only")
	}
	lua, err := filepath.Abs("../deploy/wireshark/nvmeof-iwarp.lua")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-n", "-r", path, "-X", "lua_script:"+lua, "-o", "tcp.try_heuristic_first:TRUE", "-V")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user preferences
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	text := string(out)
	for _, w := range append([]string{
		"iWARP Marker Protocol data unit Aligned framing",
		"iWARP Direct Data Placement and Remote Direct Memory Access Protocol",
		"NVMe-oF Command Capsule", "NVMe-oF Response Capsule",
	}, want...) {
		if !strings.Contains(text, w) {
			t.Errorf("tshark's output lacks %q", w)
		}
	}
	if t.Failed() {
		if len(text) > 20000 {
			text = text[:20000]
		}
		t.Logf("tshark -V:\n%s", text)
	}
}
