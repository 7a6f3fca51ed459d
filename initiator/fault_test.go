package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// rawCtl is a crafted controller on the iwarp verbs, below nvmeof/rdma's
// controller side, so that it can break the NVMe/RDMA rules: it plays a
// well-behaved controller except where fault says otherwise.
type rawCtl struct {
	ln    *iwarp.Listener
	fault func(c *rawConn, sqe *nvmeof.SQE) bool // true: handled (misbehaved)
	wg    sync.WaitGroup
	mu    sync.Mutex
	qps   []*iwarp.QP
}

type rawConn struct {
	ctl  *rawCtl
	qp   *iwarp.QP
	qid  uint16
	recv []iwarp.RecvWR
	mu   sync.Mutex
	cc   nvmeof.CC
	sqhd uint16
	size int
}

func startRawCtl(t *testing.T, fault func(c *rawConn, sqe *nvmeof.SQE) bool) *rawCtl {
	t.Helper()
	ln, err := iwarp.Listen("tcp", "127.0.0.1:0", &iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawCtl{ln: ln, fault: fault}
	ctx, cancel := context.WithCancel(context.Background())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			cr, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			r.accept(cr)
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		r.wg.Wait()
		r.mu.Lock()
		qps := r.qps
		r.mu.Unlock()
		for _, qp := range qps {
			qp.Close()
		}
	})
	return r
}

func (r *rawCtl) addr() string { return r.ln.Addr().String() }

func (r *rawCtl) accept(cr *iwarp.ConnRequest) {
	cm, err := rdma.ParseCMRequest(cr.PrivateData)
	if err != nil {
		_ = cr.Reject(nil)
		return
	}
	size := int(cm.HSQSize) + 1
	c := &rawConn{ctl: r, qid: cm.QID, size: size}
	pd := iwarp.NewPD()
	cq := iwarp.NewCQHandler(c.onWC)
	qp, err := iwarp.NewQP(iwarp.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, SendDepth: 4 * size, RecvDepth: size, IRD: 1, ORD: 16})
	if err != nil {
		_ = cr.Reject(nil)
		return
	}
	c.qp = qp
	c.recv = make([]iwarp.RecvWR, size)
	for i := range c.recv {
		c.recv[i] = iwarp.RecvWR{ID: uint64(i), Buf: make([]byte, nvmeof.SQESize+8192)}
		_ = qp.PostRecv(&c.recv[i])
	}
	acc := rdma.CMAccept{CRQSize: uint16(size)}
	if err := cr.Accept(qp, acc.Append(nil)); err != nil {
		return
	}
	r.mu.Lock()
	r.qps = append(r.qps, qp)
	r.mu.Unlock()
}

func (c *rawConn) onWC(wc *iwarp.WC) {
	if wc.Opcode != iwarp.WCRecv || wc.Status != iwarp.WCSuccess {
		return
	}
	sqe := new(nvmeof.SQE)
	copy(sqe[:], c.recv[wc.ID].Buf)
	_ = c.qp.PostRecv(&c.recv[wc.ID])
	c.mu.Lock()
	c.sqhd = uint16((int(c.sqhd) + 1) % c.size) // the SQ head moves as commands are taken
	c.mu.Unlock()
	if c.ctl.fault != nil && c.ctl.fault(c, sqe) {
		return
	}
	c.serve(sqe)
}

// complete sends the CQE for sqe.
func (c *rawConn) complete(sqe *nvmeof.SQE, result uint64, st nvmeof.Status) {
	cqe := make([]byte, nvmeof.CQESize)
	q := (*nvmeof.CQE)(cqe)
	c.mu.Lock()
	sqhd := c.sqhd
	c.mu.Unlock()
	q.Complete(sqe, c.qid, sqhd, 0, st)
	q.SetResult64(result)
	_ = c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: [][]byte{cqe}})
}

// write RDMA-Writes data to the command's keyed buffer.
func (c *rawConn) write(sqe *nvmeof.SQE, data []byte) {
	d, _ := nvmeof.ParseSGL(sqe[24:40])
	_ = c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRWrite, Local: [][]byte{data}, RemoteSTag: d.Key, RemoteTO: d.Addr})
}

// serve is the well-behaved controller: one 1 MiB namespace of zeroes,
// one I/O queue, no in-capsule data, no AEN.
func (c *rawConn) serve(sqe *nvmeof.SQE) {
	switch {
	case sqe.Opcode() == nvmeof.OpFabrics:
		switch sqe[4] {
		case nvmeof.FCTypeConnect:
			c.complete(sqe, uint64(nvmeof.NewConnectResponse(1)), 0)
		case nvmeof.FCTypePropertyGet:
			var v uint64
			switch sqe.PropertyGetCmd().Offset() {
			case nvmeof.PropCAP:
				var cp nvmeof.CAP
				cp.SetMQES(31)
				cp.SetTO(2)
				cp.SetCSS(nvmeof.CAPCSSNVM)
				v = uint64(cp)
			case nvmeof.PropVS:
				v = uint64(nvmeof.VS1_3)
			case nvmeof.PropCC:
				c.mu.Lock()
				v = uint64(c.cc)
				c.mu.Unlock()
			case nvmeof.PropCSTS:
				var s nvmeof.CSTS
				c.mu.Lock()
				s.SetRDY(c.cc.EN())
				if c.cc.SHN() != 0 {
					s.SetSHST(nvmeof.SHSTComplete)
				}
				c.mu.Unlock()
				v = uint64(s)
			}
			c.complete(sqe, v, 0)
		case nvmeof.FCTypePropertySet:
			c.mu.Lock()
			c.cc = nvmeof.CC(sqe.PropertySetCmd().Value())
			c.mu.Unlock()
			c.complete(sqe, 0, 0)
		}
	case c.qid == 0 && sqe.Opcode() == nvmeof.AdminIdentify:
		buf := make([]byte, nvmeof.IdentifyDataSize)
		switch sqe.IdentifyCmd().CNS() {
		case nvmeof.CNSController:
			id := (*nvmeof.IdentifyController)(buf)
			id.SetCNTLID(1)
			id.SetCNTRLTYPE(nvmeof.CntrlTypeIO)
			id.SetSUBNQN(testSubNQN)
			id.SetKAS(10)
			id.SetIOCCSZ(4)
			id.SetIORCSZ(1)
			id.SetSGLS(nvmeof.SGLSSupported | nvmeof.SGLSKeyed)
			id.SetNN(1)
			id.SetMDTS(5)
		case nvmeof.CNSActiveNSList:
			binary.LittleEndian.PutUint32(buf, 1)
		case nvmeof.CNSNSDescList:
			_, _ = nvmeof.EncodeNSDescriptors(buf, nvmeof.NSIdentifiers{UUID: [16]byte{1}, HasUUID: true})
		case nvmeof.CNSNamespace:
			id := (*nvmeof.IdentifyNamespace)(buf)
			id.SetNSZE(2048)
			id.SetNCAP(2048)
			id.SetLBAF(0, nvmeof.LBAFormat{LBADS: 9})
		}
		c.write(sqe, buf)
		c.complete(sqe, 0, 0)
	case c.qid == 0 && sqe.Opcode() == nvmeof.AdminSetFeatures:
		c.complete(sqe, uint64(nvmeof.EncodeNumQueues(1, 1)), 0)
	case c.qid == 0:
		c.complete(sqe, 0, 0)
	case sqe.Opcode() == nvmeof.NVMRead:
		d, _ := nvmeof.ParseSGL(sqe[24:40])
		c.write(sqe, make([]byte, d.Length))
		c.complete(sqe, 0, 0)
	default:
		c.complete(sqe, 0, 0)
	}
}

func isIdentifyCtrl(c *rawConn, sqe *nvmeof.SQE) bool {
	return c.qid == 0 && sqe.Opcode() == nvmeof.AdminIdentify && sqe.IdentifyCmd().CNS() == nvmeof.CNSController
}

// TestMisbehavingControllerAtConnect: each broken answer during the
// association's setup gives Connect a clear error and leaves nothing
// behind (goleak); none hangs.
func TestMisbehavingControllerAtConnect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(c *rawConn, sqe *nvmeof.SQE) bool
		want  string
	}{
		{"wrong command id", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			bad := *sqe
			bad.SetCID(sqe.CID() ^ 0x0555)
			c.complete(&bad, 0, 0)
			return true
		}, "unknown command id"},
		{"oversized data", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			c.write(sqe, make([]byte, 2*nvmeof.IdentifyDataSize))
			c.complete(sqe, 0, 0)
			return true
		}, "base or bounds violation"},
		{"short data", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			c.write(sqe, make([]byte, 100))
			c.complete(sqe, 0, 0)
			return true
		}, "identify controller"},
		{"oversized response capsule", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			cqe := make([]byte, 32)
			(*nvmeof.CQE)(cqe[:16]).Complete(sqe, 0, 0, 0, 0)
			_ = c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: [][]byte{cqe}})
			return true
		}, "message too long"},
		{"bogus remote invalidation", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			cqe := make([]byte, nvmeof.CQESize)
			(*nvmeof.CQE)(cqe).Complete(sqe, 0, 0, 0, 0)
			_ = c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSendInv, Local: [][]byte{cqe}, InvalidateSTag: 0x12345678})
			return true
		}, "invalidat"},
		{"error status", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if !isIdentifyCtrl(c, sqe) {
				return false
			}
			c.complete(sqe, 0, nvmeof.StatusInternalError|nvmeof.StatusDNR)
			return true
		}, "Identify Controller: nvme status"},
		{"silent peer", func(c *rawConn, sqe *nvmeof.SQE) bool {
			return sqe.Opcode() == nvmeof.OpFabrics && sqe[4] == nvmeof.FCTypeConnect
		}, "deadline exceeded"},
		{"controller never ready", func(c *rawConn, sqe *nvmeof.SQE) bool {
			if sqe.Opcode() == nvmeof.OpFabrics && sqe[4] == nvmeof.FCTypePropertyGet && sqe.PropertyGetCmd().Offset() == nvmeof.PropCSTS {
				c.complete(sqe, 0, 0)
				return true
			}
			return false
		}, "not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRawCtl(t, tc.fault)
			cfg := testConfig(t, r.addr())
			// The silent peer is ended by the connect timeout: 2 s. Every
			// other fault must be met by its own error (the controller
			// that never gets ready by the CAP.TO wait), so the timeout is
			// long there: a loaded machine's slow Connect must not end in
			// the timeout before the fault is reached (and a host that
			// waited for the timeout instead of failing on the fault fails
			// the error check, not a clock).
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
			r := startRawCtl(t, func(c *rawConn, sqe *nvmeof.SQE) bool {
				if c.qid == 0 || sqe.Opcode() != nvmeof.NVMRead {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				if broken > 0 && !keepBreaking {
					return false
				}
				broken++
				bad := *sqe
				bad.SetCID(sqe.CID() + 1)
				c.complete(&bad, 0, 0)
				return true
			})
			cfg := testConfig(t, r.addr())
			cfg.NrIOQueues = 1
			cfg.ReconnectDelay = 50 * time.Millisecond
			cfg.NoReconnect = keepBreaking
			c := connect(t, cfg)
			_, err := c.Namespace(1).ReadAt(make([]byte, 4096), 0)
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

// TestTerminateFromController: a peer that answers the MPA exchange and
// then sends an RDMAP Terminate: Connect fails with the Terminate.
func TestTerminateFromController(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		var hdr wire.MPAHeader
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		if _, err := io.ReadFull(conn, make([]byte, hdr.PrivateDataLen())); err != nil {
			return
		}
		acc := rdma.CMAccept{CRQSize: 32}
		reply := wire.MPAFrame{Reply: true, Enhanced: true, Revision: 2, IRD: 1, ORD: 1, PrivateData: acc.Append(nil)}
		if _, err := conn.Write(reply.Append(nil)); err != nil {
			return
		}
		// Wait for the host's first FPDU (its Connect capsule), then answer
		// with a Terminate: RDMAP layer, remote operation error, "catastrophic".
		first := make([]byte, 2)
		if _, err := io.ReadFull(conn, first); err != nil {
			return
		}
		term := wire.Terminate{Cause: wire.MakeCause(wire.LayerRDMAP, 1, 0)}
		payload := term.AppendPayload(nil)
		ulpdu := wire.DDPUntaggedLen + len(payload)
		fpdu := make([]byte, wire.UntaggedHeaderLen, wire.FPDULen(ulpdu))
		wire.PutUntaggedHeader(fpdu, wire.OpTerminate, true, 0, 2, 1, 0, len(payload))
		fpdu = append(fpdu, payload...)
		fpdu = append(fpdu, wire.Pad(wire.PadLen(ulpdu))...)
		fpdu = append(fpdu, 0, 0, 0, 0) // CRC field, zero without CRC
		conn.Write(fpdu)
		io.Copy(io.Discard, conn)
	}()
	cfg := testConfig(t, ln.Addr().String())
	cfg.ConnectTimeout = 3 * time.Second
	_, err = Connect(context.Background(), cfg)
	var te *iwarp.TerminateError
	if !errors.As(err, &te) || !te.Remote {
		t.Fatalf("connect: %v, want a received Terminate", err)
	}
	t.Log(err)
	ln.Close()
	<-done
}
