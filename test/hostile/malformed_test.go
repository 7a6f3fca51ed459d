package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// The malformed-frame and protocol-abuse cases, black box against the
// daemon (the in-process suites, target/badinput_test.go and
// iwarp/fault_test.go, check the same layers from inside; these check the
// daemon as a whole, as a host on the network sees it). Each case names
// the answer it wants; where Linux siw and this engine pick different
// (both defensible) Terminate causes, either is accepted.

// mpaAnswer reads what a responder answers to an MPA request: an MPA frame
// or nothing, and then how the connection ends.
func mpaAnswer(c *rawpeer.Conn, until time.Time) (*wire.MPAFrame, rawpeer.Closed) {
	f, err := c.ReadMPA(0, until)
	if err != nil {
		how, _ := c.WaitClosed(until)
		return nil, how
	}
	if !f.Reply || !f.Reject {
		return &f, rawpeer.Open // accepted: the connection stays
	}
	how, _ := c.WaitClosed(until)
	return &f, how
}

// mpaRefused sends raw bytes as an MPA request and wants the request
// refused: no accepting reply, and the connection closed within bound
// (a reject reply before the close is allowed). wantCM, if not 0, is the
// NVMe/RDMA CM reject status the reject must carry.
func mpaRefused(t *testing.T, d *daemon, req []byte, bound time.Duration, wantCM rdma.CMRejectStatus) {
	t.Helper()
	start := time.Now()
	c, err := rawpeer.Dial(context.Background(), d.addr, rawpeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	if err := c.WriteRaw(req); err != nil {
		t.Logf("writing the request: %v", err)
	}
	f, how := mpaAnswer(c, start.Add(guard(bound)))
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case f != nil && !f.Reject:
		t.Errorf("request accepted (reply rev %d, %d bytes of private data); want a refusal", f.Revision, len(f.PrivateData))
		return
	case how == rawpeer.Open:
		t.Errorf("connection still open %v after the request (bound %v)", took, bound)
	}
	if wantCM != 0 {
		if f == nil {
			t.Errorf("closed (%v) without an MPA reject; want a reject with %v", how, wantCM)
		} else if st, err := rdma.ParseCMReject(f.PrivateData); err != nil || st != wantCM {
			t.Errorf("MPA reject with CM status %v (%v); want %v", st, err, wantCM)
		}
	}
	if f != nil {
		t.Logf("MPA reject, then closed by %v after %v", how, took)
	} else {
		t.Logf("closed by %v after %v without a reply", how, took)
	}
}

// wantTerminate waits for the target to answer on q with a Terminate of
// one of the causes and to close the connection.
func wantTerminate(t *testing.T, c *rawpeer.Conn, start time.Time, causes ...wire.Cause) {
	t.Helper()
	how, frames := c.WaitClosed(start.Add(guard(time.Second)))
	terms := rawpeer.Terminates(frames)
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case len(terms) == 0:
		t.Errorf("no Terminate (connection %v after %v); want one of %v", how, took, causes)
	case !slices.Contains(causes, terms[0].Cause):
		t.Errorf("Terminate %v; want one of %v", terms[0].Cause, causes)
	default:
		t.Logf("Terminate %v, then %v after %v", terms[0].Cause, how, took)
	}
	if how == rawpeer.Open {
		t.Errorf("connection still open %v after the Terminate", took)
	}
}

// wantStatus checks a command's completion (the More bit, which says the
// error log has an entry, aside).
func wantStatus(t *testing.T, what string, cqe nvmeof.CQE, err error, want nvmeof.Status, dw0 uint32) {
	t.Helper()
	switch {
	case err != nil:
		t.Errorf("%s: %v; want status %v", what, err, want)
	case cqe.Status()&^nvmeof.StatusMore != want || (dw0 != 0 && cqe.Result() != dw0):
		t.Errorf("%s: status %v DW0 %#x; want %v DW0 %#x", what, cqe.Status(), cqe.Result(), want, dw0)
	default:
		t.Logf("%s: %v (DW0 %#x)", what, cqe.Status(), cqe.Result())
	}
}

// mpaBytes encodes an MPA frame after mutating it.
func mpaBytes(f wire.MPAFrame, mut func(b []byte)) []byte {
	b := f.Append(nil)
	if mut != nil {
		mut(b)
	}
	return b
}

// TestMalformed runs the malformed-frame and protocol-abuse cases against
// one daemon; after each, the daemon must be alive and serve a legitimate
// host.
//
// Bounds: a refused handshake is answered and closed at once, an
// unfinished one within transport.connect_timeout = 2s; the answers to bad
// FPDUs and commands come at once (guard 30 s). The unfinished handshakes
// (the cases marked pending) run against a daemon of their own with that
// connect_timeout; the other daemon's timeouts are long, so that the raw
// hosts and legitimate hosts of the other cases can never run into them.
func TestMalformed(t *testing.T) {
	t.Parallel()
	const ct = 2 * time.Second
	d := startDaemon(t, config{})
	dct := startDaemon(t, config{Transport: []string{"connect_timeout: 2s"}})
	std := func() wire.MPAFrame { return rawpeer.QueueRequest(rawpeer.CMRequest(0, 32)) }
	cm := func(mut func(*rdma.CMRequest)) wire.MPAFrame {
		r := rawpeer.CMRequest(1, 32)
		mut(&r)
		return rawpeer.QueueRequest(r)
	}
	// admin opens a connected, enabled admin queue of a hostile host.
	n := 0
	admin := func(t *testing.T, o rawpeer.Options) *rawpeer.Host {
		n++
		return evilHost(t, d, fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:e5170000-0000-4000-8000-%012d", n), hostID(100+n), 60000, o)
	}
	// fpdu sends frames on a connected admin queue and wants a Terminate.
	fpdu := func(crc bool, frames func(q *rawpeer.Queue) []byte, causes ...wire.Cause) func(t *testing.T) {
		return func(t *testing.T) {
			h := admin(t, rawpeer.Options{CRC: crc})
			b := frames(h.Admin)
			start := time.Now()
			if err := h.Admin.WriteRaw(b); err != nil {
				t.Logf("writing: %v", err)
			}
			wantTerminate(t, h.Admin.Conn, start, causes...)
		}
	}
	keepAlive := func() []byte {
		var sqe nvmeof.SQE
		sqe.BuildKeepAlive()
		sqe.SGL1().SetNull()
		sqe.SetCID(0x77)
		return sqe[:]
	}
	// learnSTag makes the target fetch a keyed Write's data on an I/O
	// queue and returns the sink STag of its Read Request: the target's
	// own (local-only) data buffer.
	learnSTag := func(t *testing.T, h *rawpeer.Host, qid uint16) (*rawpeer.Queue, uint32) {
		q := ioQueue(t, d, h, qid, 16, rawpeer.Options{})
		src := q.Register(make([]byte, 4096), true, false)
		cqe, err := q.Do(rwSQE(true, 0, 4096, src, 0), nil, deadline(guard(time.Second)))
		if err != nil || cqe.Status() != nvmeof.StatusSuccess || len(q.ReadRequests()) != 1 {
			t.Fatalf("keyed Write: %v %v", cqe.Status(), err)
		}
		return q, q.ReadRequests()[0].SinkSTag
	}

	// pendingRead sends a keyed 4 KiB Write on a new I/O queue and returns
	// the target's Read Request for its data, unanswered.
	pendingRead := func(t *testing.T) (*rawpeer.Queue, wire.ReadRequest) {
		q := ioQueue(t, d, admin(t, rawpeer.Options{}), 1, 16, rawpeer.Options{})
		q.IgnoreReads = true
		src := q.Register(make([]byte, 4096), true, false)
		sqe := rwSQE(true, 0, 4096, src, 0)
		sqe.SetCID(9)
		if err := q.Command(sqe, nil); err != nil {
			t.Fatal(err)
		}
		ev, err := q.Next(deadline(guard(time.Second)))
		if err != nil || ev.Kind != rawpeer.EvReadRequest {
			t.Fatalf("no Read Request: %v %v", ev.Kind, err)
		}
		return q, ev.ReadRequest
	}

	// The cases that run against dct (they need connect_timeout).
	pending := map[string]bool{"MPA PD_Length 100, 50 bytes sent": true, "MPA request byte by byte, then silence": true}
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		// --- MPA request frames (RFC 5044 §7.1, RFC 6581) ---
		{"MPA bad key", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(std(), func(b []byte) { copy(b, "MPA ID Xyz Frame") }), ct, 0)
		}},
		{"MPA reply key in a request", func(t *testing.T) {
			f := std()
			f.Reply = true
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA private data of 257 bytes (siw's limit 256)", func(t *testing.T) {
			f := std()
			f.PrivateData = make([]byte, 253)
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA private data of 513 bytes (beyond RFC 5044)", func(t *testing.T) {
			f := std()
			f.PrivateData = make([]byte, 509)
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA PD_Length 65535, 100 bytes sent", func(t *testing.T) {
			b := mpaBytes(std(), func(b []byte) { binary.BigEndian.PutUint16(b[18:], 0xFFFF) })
			mpaRefused(t, d, append(b, make([]byte, 100-len(b)+20)...), ct, 0)
		}},
		{"MPA PD_Length 100, 50 bytes sent", func(t *testing.T) {
			f := std()
			f.PrivateData = make([]byte, 96)
			mpaRefused(t, dct, mpaBytes(f, nil)[:70], ct, 0)
		}},
		{"MPA revision 3", func(t *testing.T) {
			f := std()
			f.Revision = 3
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA revision 255", func(t *testing.T) {
			f := std()
			f.Revision = 255
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA markers requested", func(t *testing.T) {
			f := std()
			f.Markers = true
			start := time.Now()
			c, err := rawpeer.Dial(context.Background(), d.addr, rawpeer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Abort()
			if err := c.WriteMPA(f); err != nil {
				t.Fatal(err)
			}
			rep, how := mpaAnswer(c, start.Add(guard(ct)))
			if rep == nil || !rep.Reject || how == rawpeer.Open {
				t.Errorf("markers: reply %+v, connection %v; want an MPA reject and a close (siw rejects markers)", rep, how)
			}
		}},
		{"MPA reject flag in a request", func(t *testing.T) {
			f := std()
			f.Reject = true
			mpaRefused(t, d, mpaBytes(f, nil), ct, 0)
		}},
		{"MPA enhanced revision 2 without the IRD/ORD word", func(t *testing.T) {
			b := mpaBytes(wire.MPAFrame{Revision: 2, Enhanced: true, PrivateData: []byte{1, 2}}, nil)
			binary.BigEndian.PutUint16(b[18:], 2)
			mpaRefused(t, d, b[:22], ct, 0)
		}},
		{"MPA request with an FPDU behind it", func(t *testing.T) {
			f := std()
			b := append(f.Append(nil), make([]byte, 64)...)
			mpaRefused(t, d, b, ct, 0)
		}},
		{"MPA request byte by byte, then silence", func(t *testing.T) {
			mpaRefused(t, dct, mpaBytes(std(), nil)[:19], ct, 0)
		}},

		// --- NVMe/RDMA CM private data (NVMe-oF 1.1 §7.3.4) ---
		{"CM private data of 16 bytes", func(t *testing.T) {
			f := std()
			f.PrivateData = f.PrivateData[:16]
			mpaRefused(t, d, mpaBytes(f, nil), ct, rdma.CMRejectInvalidPrivateDataLen)
		}},
		{"CM private data missing", func(t *testing.T) {
			f := std()
			f.PrivateData = nil
			mpaRefused(t, d, mpaBytes(f, nil), ct, rdma.CMRejectInvalidPrivateDataLen)
		}},
		{"CM RECFMT 1", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(cm(func(r *rdma.CMRequest) { r.RecFmt = 1 }), nil), ct, rdma.CMRejectInvalidRecFmt)
		}},
		{"CM HSQSIZE 0 on an I/O queue", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(cm(func(r *rdma.CMRequest) { r.HSQSize = 0 }), nil), ct, rdma.CMRejectInvalidHSQSize)
		}},
		{"CM HSQSIZE 65535", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(cm(func(r *rdma.CMRequest) { r.HSQSize = 0xFFFF }), nil), ct, rdma.CMRejectInvalidHSQSize)
		}},
		{"CM admin queue of 33 entries", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(cm(func(r *rdma.CMRequest) { r.QID, r.HSQSize = 0, 32 }), nil), ct, rdma.CMRejectInvalidHSQSize)
		}},
		{"CM HRQSIZE 0", func(t *testing.T) {
			mpaRefused(t, d, mpaBytes(cm(func(r *rdma.CMRequest) { r.HRQSize = 0 }), nil), ct, rdma.CMRejectInvalidHRQSize)
		}},
		{"CM QID 65535", func(t *testing.T) {
			// Refused at the CM (invalid QID), or accepted and then the
			// Connect refuses it (QID beyond the controller's queues).
			h := admin(t, rawpeer.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), guard(ct))
			defer cancel()
			q, err := rawpeer.DialQueue(ctx, d.addr, cm(func(r *rdma.CMRequest) { r.QID = 0xFFFF }), rawpeer.Options{})
			var rej *rawpeer.CMRejectedError
			if errors.As(err, &rej) {
				if !rej.Valid || rej.Status != rdma.CMRejectInvalidQID {
					t.Errorf("QID 65535 refused with %v; want %v", rej, rdma.CMRejectInvalidQID)
				}
				q.Close()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			cqe, err := q.Connect(rawpeer.ConnectData(subNQN, h.HostNQN, h.HostID, h.CNTLID), 0, true, deadline(guard(time.Second)))
			wantStatus(t, "Connect of QID 65535", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
				nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffQID))
		}},
		{"MPA revision 1 (no IRD/ORD) still works", func(t *testing.T) {
			// The IRD check must not refuse revision 1, which carries none.
			h := admin(t, rawpeer.Options{})
			req := rawpeer.QueueRequest(rawpeer.CMRequest(1, 16))
			req.Revision, req.Enhanced, req.IRD, req.ORD = 1, false, 0, 0
			ctx, cancel := context.WithTimeout(context.Background(), guard(ct))
			defer cancel()
			q, err := rawpeer.DialQueue(ctx, d.addr, req, rawpeer.Options{})
			if err != nil {
				t.Fatalf("MPA revision 1 request: %v", err)
			}
			defer q.Close()
			cqe, err := q.Connect(rawpeer.ConnectData(subNQN, h.HostNQN, h.HostID, h.CNTLID), 0, true, deadline(guard(time.Second)))
			wantStatus(t, "I/O Connect over MPA revision 1", cqe, err, nvmeof.StatusSuccess, 0)
			src := q.Register(bytes.Repeat([]byte{1}, 4096), true, false)
			cqe, err = q.Do(rwSQE(true, 16, 4096, src, 0), nil, deadline(guard(time.Second)))
			wantStatus(t, "keyed Write over MPA revision 1", cqe, err, nvmeof.StatusSuccess, 0)
		}},
		{"MPA with CRC: an FPDU with a bad CRC", fpdu(true, func(q *rawpeer.Queue) []byte {
			if !q.CRC {
				panic("CRC not in use")
			}
			b := q.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive()))
			b[len(b)-1] ^= 0xFF
			return b
		}, wire.CauseLLPCRC)},

		// --- FPDUs on a connected admin queue (RFC 5041 §7, RFC 5040 §7) ---
		{"FPDU ULPDU_Length 0", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive())
			return q.FrameLen(seg, 0)
		}, wire.CauseDDPUntaggedTooLong, wire.CauseDDPCatastrophic, wire.CauseLLPInvalidRequest)},
		{"FPDU ULPDU_Length 65535 for a Send into a 4 KiB buffer", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, make([]byte, 200))
			return q.FrameLen(seg, 0xFFFF)[:220]
		}, wire.CauseDDPUntaggedTooLong)},
		{"FPDU Send larger than the receive buffer", fpdu(false, func(q *rawpeer.Queue) []byte {
			sqe := keepAlive()
			big := append(sqe, make([]byte, 16<<10)...)
			var b []byte
			msn := q.NextMSN(wire.QNSend)
			for off := 0; off < len(big); off += 4096 {
				end := min(off+4096, len(big))
				b = append(b, q.Frame(rawpeer.Untagged(wire.OpSend, end == len(big), 0, wire.QNSend, msn, uint32(off), big[off:end]))...)
			}
			return b
		}, wire.CauseDDPUntaggedTooLong)},
		{"FPDU Send with MSN 5 (2 expected)", fpdu(false, func(q *rawpeer.Queue) []byte {
			return q.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend)+3, 0, keepAlive()))
		}, wire.CauseDDPUntaggedMSNRange)},
		{"FPDU Send starting at MO 64", fpdu(false, func(q *rawpeer.Queue) []byte {
			return q.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 64, keepAlive()))
		}, wire.CauseDDPUntaggedInvalidMO)},
		{"FPDU Send with an MO gap", fpdu(false, func(q *rawpeer.Queue) []byte {
			msn := q.NextMSN(wire.QNSend)
			ka := keepAlive()
			return append(q.Frame(rawpeer.Untagged(wire.OpSend, false, 0, wire.QNSend, msn, 0, ka[:32])),
				q.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, msn, 48, ka[32:]))...)
		}, wire.CauseDDPUntaggedInvalidMO)},
		{"FPDU Send on QN 5", fpdu(false, func(q *rawpeer.Queue) []byte {
			return q.Frame(rawpeer.Untagged(wire.OpSend, true, 0, 5, 1, 0, keepAlive()))
		}, wire.CauseDDPUntaggedInvalidQN)},
		{"FPDU DDP version 2", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive())
			seg[0] = seg[0]&^3 | 2
			return q.Frame(seg)
		}, wire.CauseDDPUntaggedBadVersion)},
		{"FPDU RDMAP version 0", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive())
			seg[1] &^= 0xC0
			return q.Frame(seg)
		}, wire.CauseRDMAPBadVersion)},
		{"FPDU undefined RDMAP opcode 13", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive())
			seg[1] = seg[1]&0xF0 | 13
			return q.Frame(seg)
		}, wire.CauseRDMAPUnexpectedOpcode)},
		{"FPDU tagged bit on a Send", fpdu(false, func(q *rawpeer.Queue) []byte {
			seg := rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, q.NextMSN(wire.QNSend), 0, keepAlive())
			seg[0] |= 0x80
			return q.Frame(seg)
		}, wire.CauseRDMAPUnexpectedOpcode)},
		{"FPDU Read Response nobody asked for", fpdu(false, func(q *rawpeer.Queue) []byte {
			return q.Frame(rawpeer.Tagged(wire.OpReadResponse, true, 0x1234, 0, make([]byte, 64)))
		}, wire.CauseRDMAPUnexpectedOpcode, wire.CauseDDPCatastrophic)},
		{"FPDU RDMA Write to an unknown STag", fpdu(false, func(q *rawpeer.Queue) []byte {
			return q.Frame(rawpeer.Tagged(wire.OpWrite, true, 0xDEAD00, 0x1000, make([]byte, 64)))
		}, wire.CauseDDPTaggedInvalidSTag)},
		{"FPDU RDMA Read Request of an unknown STag", fpdu(false, func(q *rawpeer.Queue) []byte {
			body := make([]byte, wire.ReadRequestLen)
			(&wire.ReadRequest{SinkSTag: 0x100, Size: 4096, SrcSTag: 0xDEAD00, SrcTO: 0}).Encode(body)
			return q.Frame(rawpeer.Untagged(wire.OpReadRequest, true, 0, wire.QNReadRequest, q.NextMSN(wire.QNReadRequest), 0, body))
		}, wire.CauseRDMAPInvalidSTag)},
		{"FPDU Read Request on QN 0", fpdu(false, func(q *rawpeer.Queue) []byte {
			body := make([]byte, wire.ReadRequestLen)
			return q.Frame(rawpeer.Untagged(wire.OpReadRequest, true, 0, wire.QNSend, 1, 0, body))
		}, wire.CauseDDPUntaggedInvalidQN)},
		{"FPDU Terminate on QN 0", fpdu(false, func(q *rawpeer.Queue) []byte {
			t := wire.Terminate{Cause: wire.CauseRDMAPCatastrophic}
			return q.Frame(rawpeer.Untagged(wire.OpTerminate, true, 0, wire.QNSend, 1, 0, t.AppendPayload(nil)))
		}, wire.CauseDDPUntaggedInvalidQN)},
		{"FPDU capsule shorter than an SQE", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			start := time.Now()
			if err := h.Admin.Send(make([]byte, 8)); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, h.Admin.Conn, "after an 8-byte capsule", start, time.Second)
		}},
		{"FPDU Terminate from the host", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			start := time.Now()
			if err := h.Admin.SendTerminate(wire.Terminate{Cause: wire.CauseRDMAPCatastrophic}); err != nil {
				t.Fatal(err)
			}
			how, frames := waitClosed(t, h.Admin.Conn, "after the host's Terminate", start, time.Second)
			if n := len(rawpeer.Terminates(frames)); n > 0 && how != rawpeer.Open {
				t.Logf("the target answered with %d Terminate(s)", n)
			}
		}},
		{"FPDU RDMA Write into the target's own buffer", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q, stag := learnSTag(t, h, 1)
			start := time.Now()
			if err := q.WriteRaw(q.Frame(rawpeer.Tagged(wire.OpWrite, true, stag, q.ReadRequests()[0].SinkTO, make([]byte, 512)))); err != nil {
				t.Fatal(err)
			}
			wantTerminate(t, q.Conn, start, wire.CauseDDPTaggedInvalidSTag, wire.CauseRDMAPAccessRights)
		}},
		{"FPDU RDMA Write into another connection's buffer", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q1, stag := learnSTag(t, h, 1)
			q2 := ioQueue(t, d, h, 2, 16, rawpeer.Options{})
			start := time.Now()
			if err := q2.WriteRaw(q2.Frame(rawpeer.Tagged(wire.OpWrite, true, stag, q1.ReadRequests()[0].SinkTO, make([]byte, 512)))); err != nil {
				t.Fatal(err)
			}
			wantTerminate(t, q2.Conn, start, wire.CauseDDPTaggedInvalidSTag, wire.CauseDDPTaggedNotAssociated)
		}},
		{"FPDU RDMA Read Request of the target's own buffer", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q, stag := learnSTag(t, h, 1)
			sink := q.Register(make([]byte, 4096), false, true)
			start := time.Now()
			if err := q.SendReadRequest(wire.ReadRequest{SinkSTag: sink.STag, SinkTO: sink.TO, Size: 4096, SrcSTag: stag, SrcTO: q.ReadRequests()[0].SinkTO}); err != nil {
				t.Fatal(err)
			}
			how, frames := q.WaitClosed(start.Add(guard(time.Second)))
			for _, f := range frames {
				if f.Header.Opcode == wire.OpReadResponse && len(f.Payload) > 0 {
					t.Errorf("the target answered an RDMA Read of its own buffer with %d bytes", len(f.Payload))
				}
			}
			terms := rawpeer.Terminates(frames)
			causes := []wire.Cause{wire.CauseRDMAPAccessRights, wire.CauseRDMAPInvalidSTag, wire.CauseRDMAPSTagNotAssociated}
			if len(terms) == 0 || !slices.Contains(causes, terms[0].Cause) || how == rawpeer.Open {
				t.Errorf("terminates %v, connection %v; want one of %v and a close", terms, how, causes)
			}
		}},
		{"keyed Write answered with a short Read Response", func(t *testing.T) {
			q, rr := pendingRead(t)
			start := time.Now()
			if err := q.SendTagged(wire.OpReadResponse, rr.SinkSTag, rr.SinkTO, make([]byte, 1000), time.Time{}); err != nil {
				t.Fatal(err)
			}
			wantTerminate(t, q.Conn, start, wire.CauseDDPTaggedBaseBounds)
		}},
		{"keyed Write answered to the wrong sink STag", func(t *testing.T) {
			q, rr := pendingRead(t)
			start := time.Now()
			if err := q.SendTagged(wire.OpReadResponse, rr.SinkSTag^0x100, rr.SinkTO, make([]byte, 4096), time.Time{}); err != nil {
				t.Fatal(err)
			}
			wantTerminate(t, q.Conn, start, wire.CauseDDPTaggedInvalidSTag)
		}},
		{"Send with no receive buffer", func(t *testing.T) {
			// A queue of 4 (HSQSIZE 3): four keyed Writes whose data the
			// host never gives hold the four receive buffers; a fifth
			// command exceeds the queue.
			h := admin(t, rawpeer.Options{})
			q := ioQueue(t, d, h, 1, 4, rawpeer.Options{})
			q.IgnoreReads = true
			src := q.Register(make([]byte, 4*4096), true, false)
			for i := range 4 {
				sqe := rwSQE(true, uint64(i*8), 4096, src, i*4096)
				sqe.SetCID(uint16(10 + i))
				if err := q.Command(sqe, nil); err != nil {
					t.Fatal(err)
				}
			}
			for n := 0; n < 4; {
				ev, err := q.Next(deadline(guard(time.Second)))
				if err != nil {
					t.Fatalf("%d of 4 Read Requests: %v", n, err)
				}
				if ev.Kind == rawpeer.EvReadRequest {
					n++
				}
			}
			start := time.Now()
			if err := q.Send(keepAlive()); err != nil {
				t.Fatal(err)
			}
			wantTerminate(t, q.Conn, start, wire.CauseDDPUntaggedNoBuffer)
		}},
		{"more zero-length Read Requests than IRD", func(t *testing.T) {
			// The target's IRD is what it negotiated; a host may not
			// exceed it. Either answered, or a Terminate (siw: RDMAP
			// catastrophic error localized to stream).
			h := admin(t, rawpeer.Options{})
			q := h.Admin
			var b []byte
			for range 8 {
				body := make([]byte, wire.ReadRequestLen)
				(&wire.ReadRequest{SinkSTag: 0x100, SrcSTag: 0x200}).Encode(body)
				b = append(b, q.Frame(rawpeer.Untagged(wire.OpReadRequest, true, 0, wire.QNReadRequest, q.NextMSN(wire.QNReadRequest), 0, body))...)
			}
			if err := q.WriteRaw(b); err != nil {
				t.Fatal(err)
			}
			sqe := keepAlive()
			if err := q.Send(sqe); err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := q.Next(deadline(guard(time.Second)))
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				if ev.Kind == rawpeer.EvTerminate {
					if ev.Terminate.Cause != wire.CauseRDMAPStreamCatastrophic {
						t.Errorf("Terminate %v; want %v", ev.Terminate.Cause, wire.CauseRDMAPStreamCatastrophic)
					}
					return
				}
				if ev.Kind == rawpeer.EvCQE {
					t.Logf("answered; the Keep Alive completed: %v", ev.CQE.Status())
					return
				}
			}
		}},

		// --- NVMe over Fabrics commands ---
		{"Identify before Connect", func(t *testing.T) {
			q := dialQueue(t, d, 0, 32, rawpeer.Options{})
			buf := q.Register(make([]byte, 4096), false, true)
			var sqe nvmeof.SQE
			sqe.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
			sqe.SGL1().SetKeyed(buf.TO, 4096, buf.STag, false)
			cqe, err := q.Do(&sqe, nil, deadline(guard(time.Second)))
			wantStatus(t, "Identify before Connect", cqe, err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR, 0)
		}},
		{"Connect twice on the admin queue", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			cqe, err := h.Admin.Connect(rawpeer.ConnectData(subNQN, h.HostNQN, h.HostID, nvmeof.CNTLIDDynamic), 60000, false, deadline(guard(time.Second)))
			if err != nil || cqe.Status() == nvmeof.StatusSuccess || cqe.Status()&nvmeof.StatusDNR == 0 {
				t.Errorf("second Connect: %v %v; want a failure with DNR", cqe.Status(), err)
			}
		}},
		{"I/O Connect to a controller that does not exist", func(t *testing.T) {
			q := dialQueue(t, d, 1, 16, rawpeer.Options{})
			cqe, err := q.Connect(rawpeer.ConnectData(subNQN, evilNQN, evilID, 0x4321), 0, true, deadline(guard(time.Second)))
			wantStatus(t, "I/O Connect to CNTLID 0x4321", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
				nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffCNTLID))
		}},
		{"I/O Connect to another host's controller", func(t *testing.T) {
			victim := admin(t, rawpeer.Options{})
			q := dialQueue(t, d, 1, 16, rawpeer.Options{})
			cqe, err := q.Connect(rawpeer.ConnectData(subNQN, evilNQN2, evilID2, victim.CNTLID), 0, true, deadline(guard(time.Second)))
			wantStatus(t, "I/O Connect with another host's CNTLID", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
				nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffCNTLID))
		}},
		{"I/O Connect with SQSIZE beyond the CM queue", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q := dialQueue(t, d, 1, 16, rawpeer.Options{})
			sqe, data := q.ConnectSQE(rawpeer.ConnectData(subNQN, h.HostNQN, h.HostID, h.CNTLID), 0, true)
			sqe.ConnectCmd().SetSQSize(63)
			cqe, err := q.Do(sqe, data, deadline(guard(time.Second)))
			wantStatus(t, "I/O Connect of SQSIZE 63 on a queue of 16", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
				nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffSQSIZE))
		}},
		{"Read before the controller is enabled", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
			defer cancel()
			h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, evilNQN2, evilID2, 60000, rawpeer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			q := ioQueue(t, d, h, 1, 16, rawpeer.Options{})
			buf := q.Register(make([]byte, 4096), false, true)
			cqe, err := q.Do(rwSQE(false, 0, 4096, buf, 0), nil, deadline(guard(time.Second)))
			wantStatus(t, "Read on a disabled controller", cqe, err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR, 0)
		}},
		{"keyed SGL longer than MDTS", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q := ioQueue(t, d, h, 1, 16, rawpeer.Options{})
			buf := q.Register(make([]byte, 4096), false, true)
			for _, n := range []uint32{2 << 20, nvmeof.MaxKeyedSGLLength} {
				var sqe nvmeof.SQE
				sqe.BuildRead(1, 0, n/512)
				sqe.SGL1().SetKeyed(buf.TO, n, buf.STag, false)
				cqe, err := q.Do(&sqe, nil, deadline(guard(time.Second)))
				wantStatus(t, fmt.Sprintf("keyed Read of %d bytes", n), cqe, err, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR, 0)
			}
		}},
		{"Read beyond the namespace", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			q := ioQueue(t, d, h, 1, 16, rawpeer.Options{})
			buf := q.Register(make([]byte, 4096), false, true)
			cqe, err := q.Do(rwSQE(false, 64<<20/512-4, 4096, buf, 0), nil, deadline(guard(time.Second)))
			wantStatus(t, "Read across the end", cqe, err, nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR, 0)
		}},
		{"half-close after a command", func(t *testing.T) {
			h := admin(t, rawpeer.Options{})
			start := time.Now()
			if err := h.Admin.Send(keepAlive()); err != nil {
				t.Fatal(err)
			}
			if err := h.Admin.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, h.Admin.Conn, "after the host's FIN", start, time.Second)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t)
			if pending[tc.name] {
				dct.healthy(t, "after "+tc.name)
			} else {
				d.healthy(t, "after "+tc.name)
			}
		})
	}
}
