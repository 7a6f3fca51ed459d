package target

import (
	"bytes"
	"testing"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// TestTCPSQFlowControlDisable: a host that disables SQ flow control in its
// Connects (CATTR bit 2, as `nvme connect --disable-sqflow` does) gets SQHD
// FFFFh in every completion, from the Connect's own on; a successful read
// on its I/O queue is answered by one C2HData with LAST_PDU and SUCCESS and
// no CapsuleResp (TCP 1.0 §3.6.2.7, as nvmet-tcp does when sqhd_disabled),
// with and without digests; a failed read still gets its CapsuleResp. A
// host that keeps SQ flow control gets SQHD counting and a CapsuleResp
// after every C2HData. The discovery log of both ports says TREQ "SQ flow
// control disable supported" (NVMF_TREQ_DISABLE_SQFLOW, as nvmet sets on
// every port), TSAS zero on the TCP port (SECTYPE none).
//
// Before: SQHD counted whatever the Connect said, every read got a
// CapsuleResp, TREQ was 0.
func TestTCPSQFlowControlDisable(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		for _, off := range []bool{true, false} {
			name := map[bool]string{false: "no-digests", true: "digests"}[d.Header] + map[bool]string{true: "/sqflow-disabled", false: "/sqflow"}[off]
			t.Run(name, func(t *testing.T) {
				adm := rawtcp.Dial(t, portAddr(s, 2), d)
				adm.SQFlowOff = off
				cntlid := adm.Connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic, testKATO)
				if off && adm.SQHD != 0xFFFF {
					t.Errorf("admin Connect response SQHD %#x, want 0xFFFF", adm.SQHD)
				}
				adm.Enable()
				if off && adm.SQHD != 0xFFFF {
					t.Errorf("admin completion SQHD %#x, want 0xFFFF", adm.SQHD)
				}
				if !off && adm.SQHD == 0xFFFF {
					t.Errorf("SQHD 0xFFFF with SQ flow control on")
				}
				io := rawtcp.Dial(t, portAddr(s, 2), d)
				io.SQFlowOff = off
				io.Connect(1, 32, testSubNQN, cntlid, testKATO)
				want := pattern(64<<10, 9)
				var sqe nvmeof.SQE
				sqe.BuildWrite(1, 0, uint32(len(want)/512))
				if st, _ := io.Do(&sqe, want, false, nil); st != nvmeof.StatusSuccess || io.Success {
					t.Fatalf("write: %v (by SUCCESS flag: %v)", st, io.Success)
				}
				for _, n := range []int{4096, 64 << 10} {
					got := make([]byte, n)
					sqe = nvmeof.SQE{}
					sqe.BuildRead(1, 0, uint32(n/512))
					io.Success = false
					if st, _ := io.Do(&sqe, nil, false, got); st != nvmeof.StatusSuccess {
						t.Fatalf("read %d: %v", n, st)
					}
					if io.Success != off {
						t.Errorf("read %d answered by the C2HData's SUCCESS flag: %v, want %v", n, io.Success, off)
					}
					if !bytes.Equal(got, want[:n]) {
						t.Fatalf("read %d: other data than written", n)
					}
				}
				// A read past the end fails: a CapsuleResp with the error.
				sqe = nvmeof.SQE{}
				sqe.BuildRead(1, 1<<40, 8)
				if st, _ := io.Do(&sqe, nil, false, make([]byte, 4096)); st == nvmeof.StatusSuccess || io.Success {
					t.Errorf("read past the end: %v (by SUCCESS flag: %v)", st, io.Success)
				}
				if off && io.SQHD != 0xFFFF {
					t.Errorf("I/O completion SQHD %#x, want 0xFFFF", io.SQHD)
				}
				// The next command's response is its own (no stray
				// CapsuleResp of a read answered by SUCCESS): do checks
				// the CID.
				sqe = nvmeof.SQE{}
				sqe.BuildFlush(1)
				if st, _ := io.Do(&sqe, nil, false, nil); st != nvmeof.StatusSuccess {
					t.Fatalf("flush: %v", st)
				}
			})
		}
	}

	// TREQ and TSAS of both ports' discovery logs.
	for _, port := range []uint16{1, 2} {
		var entries []nvmeof.DiscoveryEntry
		if port == 1 {
			h := discover(t, portAddr(s, 1), testHostNQN)
			_, entries = readDiscoveryLog(t, h)
		} else {
			h := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{})
			h.Connect(0, nvmeof.AdminQueueDepth, nvmeof.DiscoveryNQN, nvmeof.CNTLIDDynamic, testKATO)
			h.Enable()
			page := make([]byte, 3*1024)
			var sqe nvmeof.SQE
			sqe.BuildGetLogPage(nvmeof.LIDDiscovery, 0, 0, uint32(len(page)))
			if st, _ := h.Do(&sqe, nil, false, page); st != nvmeof.StatusSuccess {
				t.Fatalf("get discovery log: %v", st)
			}
			dl, err := nvmeof.ParseDiscoveryLog(page)
			if err != nil {
				t.Fatal(err)
			}
			entries = dl.Entries
			for i := range entries {
				raw := page[1024*(i+1):][768:1024]
				if !bytes.Equal(raw, make([]byte, 256)) {
					t.Errorf("TCP port entry %d: TSAS % x, want zero (SECTYPE none)", i, raw[:8])
				}
			}
		}
		if len(entries) == 0 {
			t.Fatalf("port %d: no discovery log entries", port)
		}
		for i, e := range entries {
			if e.TReq != nvmeof.TREQNotSpecified|nvmeof.TREQDisableSQFlow {
				t.Errorf("port %d entry %d: TREQ %#x, want %#x (secure channel not specified, SQ flow control disable supported)", port, i, e.TReq, nvmeof.TREQDisableSQFlow)
			}
		}
	}
}
