package initiator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/target"
)

// A misbehaving controller is the real target made to misbehave: NVMe-level
// faults through its test hooks (a rewritten CID, status or result, a held
// command), wire-level faults through a raw peer between host and target
// (rawpeer.Proxy) that replaces what the target sends.

func isIdentifyCtrl(sqe *nvmeof.SQE) bool {
	return !sqe.IsFabrics() && sqe.Opcode() == nvmeof.AdminIdentify && sqe.IdentifyCmd().CNS() == nvmeof.CNSController
}

// identifyFault is a proxy hook that lets the target's answer to Identify
// Controller through, except what data or response replace: data sees the
// segments of the RDMA Write of the Identify data (seg counts them from 0;
// it returns true when it took care of the segment), response the response
// capsule (the Send), next the response capsule of the command after it
// (with the Identify command's STag).
type identifyFault struct {
	data     func(l *rawpeer.Link, f *rawpeer.FPDU, seg int) bool
	response func(l *rawpeer.Link, f *rawpeer.FPDU) bool
	next     func(l *rawpeer.Link, f *rawpeer.FPDU, stag uint32) bool

	mu    sync.Mutex
	stag  map[*rawpeer.Link]uint32 // the Identify Controller command's STag
	cid   map[*rawpeer.Link]uint16 // and its CID
	armed map[*rawpeer.Link]bool
	segs  map[*rawpeer.Link]int
	after map[*rawpeer.Link]bool // Identify answered: the next response is next's
}

func (x *identifyFault) hook(l *rawpeer.Link, d rawpeer.Direction, f *rawpeer.FPDU) bool {
	h := &f.Header
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stag == nil {
		x.stag, x.cid, x.armed, x.segs, x.after = map[*rawpeer.Link]uint32{}, map[*rawpeer.Link]uint16{}, map[*rawpeer.Link]bool{}, map[*rawpeer.Link]int{}, map[*rawpeer.Link]bool{}
	}
	switch {
	case d == rawpeer.ToResponder:
		// A command capsule: its first segment starts with the SQE.
		if !h.Tagged && (h.Opcode == wire.OpSend || h.Opcode == wire.OpSendSE) && h.MO == 0 && len(f.Payload) >= nvmeof.SQESize {
			sqe := (*nvmeof.SQE)(f.Payload[:nvmeof.SQESize])
			if isIdentifyCtrl(sqe) {
				if desc, err := sqe.DecodeSGL1(); err == nil && desc.Kind == nvmeof.SGLKeyed {
					x.stag[l], x.cid[l], x.armed[l] = desc.Key, sqe.CID(), true
				}
			}
		}
	case x.after[l] && (h.Opcode == wire.OpSend || h.Opcode == wire.OpSendInv):
		x.after[l] = false
		if x.next != nil {
			return x.next(l, f, x.stag[l])
		}
	case !x.armed[l]:
	case h.Opcode == wire.OpWrite && h.STag == x.stag[l]:
		seg := x.segs[l]
		x.segs[l]++
		if x.data != nil {
			return x.data(l, f, seg)
		}
	case (h.Opcode == wire.OpSend || h.Opcode == wire.OpSendInv) && len(f.Payload) >= nvmeof.CQESize &&
		(*nvmeof.CQE)(f.Payload[:nvmeof.CQESize]).CID() == x.cid[l]:
		x.armed[l], x.after[l] = false, true
		if x.response != nil {
			return x.response(l, f)
		}
	}
	return false
}

// startProxy runs a raw peer between the host and tg with hook.
func startProxy(t *testing.T, tg *testTarget, hook rawpeer.ProxyHook) *rawpeer.Proxy {
	t.Helper()
	p, err := rawpeer.NewProxy(tg.Addr(), hook, rawpeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// sendAs sends payload to the host as one untagged message of op in place
// of the message f (same MSN).
func sendAs(l *rawpeer.Link, f *rawpeer.FPDU, op wire.Opcode, inv uint32, payload []byte) bool {
	_ = l.Initiator.WriteRaw(l.Initiator.Frame(rawpeer.Untagged(op, true, inv, wire.QNSend, f.Header.MSN, 0, payload)))
	return true
}

// TestMisbehavingControllerAtConnect: each broken answer during the
// association's setup gives Connect a clear error and leaves nothing
// behind (goleak); none hangs.
func TestMisbehavingControllerAtConnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		// Either target hooks or a wire fault between host and target.
		command  func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict
		response func(q target.HookQueue, sqe *nvmeof.SQE, rsp target.HookResponse) target.HookResponse
		wire     *identifyFault
		want     string
	}{
		{name: "wrong command id", command: func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
			if isIdentifyCtrl(sqe) {
				sqe.SetCID(sqe.CID() ^ 0x0555) // the response names another command
			}
			return target.Verdict{}
		}, want: "unknown command id"},
		{name: "oversized data", wire: &identifyFault{data: func(l *rawpeer.Link, f *rawpeer.FPDU, seg int) bool {
			// An RDMA Write of twice the command's buffer to its STag.
			if seg == 0 {
				_ = l.Initiator.SendTagged(wire.OpWrite, f.Header.STag, f.Header.TO, make([]byte, 2*nvmeof.IdentifyDataSize), time.Time{})
			}
			return true
		}}, want: "base or bounds violation"},
		{name: "short data", wire: &identifyFault{data: func(l *rawpeer.Link, f *rawpeer.FPDU, seg int) bool {
			// Only the first 100 bytes of the Identify data reach the host.
			if seg == 0 {
				_ = l.Initiator.SendTagged(wire.OpWrite, f.Header.STag, f.Header.TO, f.Payload[:min(100, len(f.Payload))], time.Time{})
			}
			return true
		}}, want: "identify controller"},
		{name: "oversized response capsule", wire: &identifyFault{response: func(l *rawpeer.Link, f *rawpeer.FPDU) bool {
			return sendAs(l, f, wire.OpSend, 0, append(f.Payload[:nvmeof.CQESize:nvmeof.CQESize], make([]byte, 16)...))
		}}, want: "message too long"},
		{name: "bogus remote invalidation", wire: &identifyFault{response: func(l *rawpeer.Link, f *rawpeer.FPDU) bool {
			return sendAs(l, f, wire.OpSendInv, 0x12345678, f.Payload[:nvmeof.CQESize])
		}}, want: "STag cannot be invalidated"},
		{name: "remote invalidation of another command's STag", wire: &identifyFault{next: func(l *rawpeer.Link, f *rawpeer.FPDU, stag uint32) bool {
			// The command after Identify carries no data, yet its response
			// invalidates the Identify buffer's STag: an STag the engine
			// knows, which the binding must refuse (nvme-rdma "Bogus
			// remote invalidation").
			return sendAs(l, f, wire.OpSendInv, stag, f.Payload[:nvmeof.CQESize])
		}}, want: "remote invalidation of STag"},
		{name: "error status", command: func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
			if isIdentifyCtrl(sqe) {
				return target.Verdict{Action: target.HookFail, Status: nvmeof.StatusInternalError | nvmeof.StatusDNR}
			}
			return target.Verdict{}
		}, want: "Identify Controller: nvme status"},
		{name: "silent peer", command: func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
			if sqe.IsFabrics() && sqe.FCType() == nvmeof.FCTypeConnect {
				return target.Verdict{Action: target.HookHold}
			}
			return target.Verdict{}
		}, want: "deadline exceeded"},
		{name: "controller never ready", response: func(q target.HookQueue, sqe *nvmeof.SQE, rsp target.HookResponse) target.HookResponse {
			if !sqe.IsFabrics() || sqe.FCType() != nvmeof.FCTypePropertyGet {
				return rsp
			}
			switch sqe.PropertyGetCmd().Offset() {
			case nvmeof.PropCSTS:
				rsp.Result, rsp.SetResult = 0, true // RDY never comes
			case nvmeof.PropCAP:
				var cp nvmeof.CAP
				cp.SetMQES(31)
				cp.SetTO(1) // the host waits 500 ms for RDY
				cp.SetCSS(nvmeof.CAPCSSNVM)
				rsp.Result, rsp.SetResult = uint64(cp), true
			}
			return rsp
		}, want: "not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startTarget(t, withCommandHook(tc.command), withResponseHook(tc.response))
			addr := tg.Addr()
			if tc.wire != nil {
				addr = startProxy(t, tg, tc.wire.hook).Addr()
			}
			cfg := testConfig(t, addr)
			// The silent peer is ended by the connect timeout: 2 s. Every
			// other fault must be met by its own error (the controller
			// that never gets ready by the host's CAP.TO wait), so the
			// timeout is long there: a loaded machine's slow Connect must
			// not end in the timeout before the fault is reached (and a
			// host that waited for the timeout instead of failing on the
			// fault fails the error check, not a clock).
			cfg.ConnectTimeout = time.Minute
			if tc.want == "deadline exceeded" {
				cfg.ConnectTimeout = 2 * time.Second
			}
			start := time.Now()
			c, err := Connect(context.Background(), cfg)
			if err == nil {
				c.Close(context.Background())
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
			t.Logf("%v (%v)", err, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestMisbehavingControllerAtRuntime: a broken completion of an I/O command
// makes the host recover (reconnect); when the controller keeps breaking
// and reconnection is off, the I/O fails with ErrControllerLost and the
// controller is torn down cleanly.
func TestMisbehavingControllerAtRuntime(t *testing.T) {
	for _, keepBreaking := range []bool{false, true} {
		name := "once"
		if keepBreaking {
			name = "always"
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			broken := 0
			tg := startTarget(t, withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
				if q.QID() == 0 || sqe.Opcode() != nvmeof.NVMRead {
					return target.Verdict{}
				}
				mu.Lock()
				defer mu.Unlock()
				if broken > 0 && !keepBreaking {
					return target.Verdict{}
				}
				broken++
				sqe.SetCID(sqe.CID() + 1) // the completion names another command
				return target.Verdict{}
			}))
			cfg := testConfig(t, tg.Addr())
			cfg.NrIOQueues = 1
			cfg.ReconnectDelay = 50 * time.Millisecond
			cfg.NoReconnect = keepBreaking
			// The bad completion itself must start the recovery, not the
			// I/O timeout: a host that dropped it would wait this long.
			cfg.IOTimeout = 10 * time.Minute
			c := connect(t, cfg)
			done := make(chan error, 1)
			go func() {
				_, err := c.Namespace(1).ReadAt(make([]byte, 4096), 0)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the read never completed: the bad completion went unnoticed")
			}
			if keepBreaking {
				if !errors.Is(err, ErrControllerLost) {
					t.Fatalf("read: %v", err)
				}
				t.Log(err)
				<-c.Done()
				return
			}
			if err != nil || c.Reconnects() != 1 {
				t.Fatalf("read: %v after %d reconnects", err, c.Reconnects())
			}
		})
	}
}

// TestTerminateFromController: a controller that answers the MPA exchange
// and then, to the host's first FPDU (its Connect capsule), sends an RDMAP
// Terminate: Connect fails with the Terminate.
func TestTerminateFromController(t *testing.T) {
	tg := startTarget(t)
	var once sync.Once
	p := startProxy(t, tg, func(l *rawpeer.Link, d rawpeer.Direction, f *rawpeer.FPDU) bool {
		if d != rawpeer.ToResponder {
			return false
		}
		terminated := false
		once.Do(func() {
			// RDMAP layer, remote operation error, "catastrophic".
			_ = l.Initiator.SendTerminate(wire.Terminate{Cause: wire.MakeCause(wire.LayerRDMAP, 1, 0)})
			terminated = true
		})
		return terminated
	})
	cfg := testConfig(t, p.Addr())
	cfg.ConnectTimeout = 3 * time.Second
	_, err := Connect(context.Background(), cfg)
	if rdma.CauseOf(err) != rdma.EndTerminateReceived {
		t.Fatalf("connect: %v (%v), want a received Terminate", err, rdma.CauseOf(err))
	}
	t.Log(err)
}
