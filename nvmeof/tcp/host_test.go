package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// hostConnect opens a host queue to ln and sends its Fabrics Connect.
func hostConnect(t testing.TB, addr string, qid uint16, cfg HostConfig) *HostQueue {
	t.Helper()
	cfg.QID = qid
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := Dial(ctx, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	data := make([]byte, nvmeof.ConnectDataSize)
	cd := (*nvmeof.ConnectData)(data)
	cd.SetSubNQN("nqn.2014-08.org.nvmexpress:uuid:test")
	cd.SetHostNQN("nqn.2014-08.org.nvmexpress:uuid:host")
	r := &nvmeof.HostRequest{Data: data, Write: true}
	r.SQE.BuildConnect(qid, uint16(q.Size()-1), 0)
	if err := q.Do(ctx, r); err != nil {
		t.Fatalf("connect qid %d: %v", qid, err)
	}
	return q
}

// rw builds an NVM Read or Write of len(buf) bytes at slba.
func rw(r *nvmeof.HostRequest, write bool, slba uint64, buf []byte) {
	if write {
		r.SQE.BuildWrite(1, slba, uint32(len(buf)/512))
	} else {
		r.SQE.BuildRead(1, slba, uint32(len(buf)/512))
	}
	r.Data, r.Write = buf, write
}

// TestHostLoopbackIO: the host queue against the controller queue over
// loopback: in-capsule writes, R2T writes split at MAXH2CDATA, reads of
// one and many C2HData PDUs, with and without digests.
func TestHostLoopbackIO(t *testing.T) {
	for _, d := range []wire.Digests{{}, {Header: true}, {Data: true}, {Header: true, Data: true}} {
		t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v", d.Header, d.Data), func(t *testing.T) {
			m := newMemHandler()
			ln := serve(t, Config{MaxH2CData: 4096, InlineDataSize: 8192}, m)
			q := hostConnect(t, ln.Addr().String(), 1, HostConfig{Digests: d, InlineDataSize: 8192, QueueSize: 16})
			if q.Digests() != d || q.MaxH2CData() != 4096 {
				t.Fatalf("negotiated %+v MAXH2CDATA %d", q.Digests(), q.MaxH2CData())
			}
			ctx := context.Background()
			slba := uint64(0)
			for i, n := range []int{512, 8192, 8192 + 512, 64 << 10, 256 << 10} {
				if i > 0 {
					slba += 256 // 128 KiB apart: inside the 1 MiB RAM disk
				}
				w := pattern(n, byte(i+1))
				var r nvmeof.HostRequest
				rw(&r, true, slba, w)
				if err := q.Do(ctx, &r); err != nil {
					t.Fatalf("write %d bytes: %v", n, err)
				}
				got := make([]byte, n)
				rw(&r, false, slba, got)
				if err := q.Do(ctx, &r); err != nil {
					t.Fatalf("read %d bytes: %v", n, err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("%d bytes read back differ", n)
				}
				m.mu.Lock()
				same := bytes.Equal(m.mem[slba*512:slba*512+uint64(n)], w)
				m.mu.Unlock()
				if !same {
					t.Fatalf("%d bytes: the controller holds other data", n)
				}
			}
			st := q.Stats()
			if st.InCapsule != 3 || st.R2T != 3 || st.H2CData < 2+16+64 || st.DataDigestErrors != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestHostAllocsPerIO: a read and an R2T write in steady state allocate
// nothing on the host side (the controller queue included, as its own test
// shows).
func TestHostAllocsPerIO(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		m := newMemHandler()
		ln := serve(t, Config{}, m)
		q := hostConnect(t, ln.Addr().String(), 1, HostConfig{Digests: d, InlineDataSize: 4096})
		done := make(chan struct{}, 1)
		var rd, wr, wi nvmeof.HostRequest
		for _, r := range []*nvmeof.HostRequest{&rd, &wr, &wi} {
			r.Done = func(*nvmeof.HostRequest) { done <- struct{}{} }
		}
		rbuf, wbuf, ibuf := make([]byte, 64<<10), pattern(64<<10, 3), pattern(4096, 4)
		do := func(r *nvmeof.HostRequest) {
			if err := q.Submit(r); err != nil {
				t.Fatal(err)
			}
			<-done
			if err := r.Status(); err != nil {
				t.Fatal(err)
			}
		}
		once := func() {
			rw(&wr, true, 0, wbuf)
			do(&wr)
			rw(&wi, true, 200, ibuf)
			do(&wi)
			rw(&rd, false, 0, rbuf)
			do(&rd)
		}
		// The controller's request contexts (one per queue entry) grow
		// their buffer and arm their R2T timer at their first use.
		for range 2 * q.Size() {
			once()
		}
		if n := testing.AllocsPerRun(200, once); n > 0 {
			t.Errorf("digests %+v: %.1f allocations per R2T write + in-capsule write + read, want 0", d, n)
		}
	}
}

// rawController is a hostile NVMe/TCP controller for host tests: it
// answers the ICReq, completes the Fabrics Connect, then runs its script.
type rawController struct {
	ln   net.Listener
	conn chan net.Conn
}

func newRawController(t *testing.T, icresp *wire.ICResp) *rawController {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawController{ln: ln, conn: make(chan net.Conn, 1)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		var b [wire.ICSize]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			_ = c.Close()
			return
		}
		if icresp == nil {
			icresp = wire.NewICResp(0, wire.Digests{}, 8192)
		}
		_, _ = c.Write(icresp[:])
		rc.conn <- c
	}()
	return rc
}

// readCapsule reads one CapsuleCmd (no digests) and its in-capsule data.
func readCapsule(t *testing.T, c net.Conn) (nvmeof.SQE, []byte) {
	t.Helper()
	var hb [wire.CapsuleCmdHLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatalf("capsule: %v", err)
	}
	h, _ := wire.ParseHeader(hb[:])
	if h.Type != wire.TypeCapsuleCmd {
		t.Fatalf("%s, want a CapsuleCmd", h.Type)
	}
	data := make([]byte, int(h.PLen)-wire.CapsuleCmdHLen)
	if _, err := io.ReadFull(c, data); err != nil {
		t.Fatal(err)
	}
	return *wire.CapsuleSQE(hb[:]), data
}

func respPDU(cid uint16, st nvmeof.Status) []byte {
	var b [wire.CapsuleRespHLen]byte
	wire.NewHeader(wire.TypeCapsuleResp, 0, wire.Digests{}, 0, 0).Put(b[:])
	cqe := wire.CapsuleCQE(b[:])
	cqe.SetCID(cid)
	cqe.SetStatus(st)
	return b[:]
}

func dataPDU(t wire.PDUType, flags uint8, cid, ttag uint16, off, n uint32, data []byte) []byte {
	b := make([]byte, wire.DataHLen)
	dl := uint32(len(data))
	if t == wire.TypeR2T {
		dl = 0
	}
	wire.PutDataHeader(b, wire.NewHeader(t, flags, wire.Digests{}, dl, 0), cid, ttag, off, n)
	return append(b, data...)
}

// TestHostHostileController: a controller that breaks the protocol after
// the Fabrics Connect. The host must end the queue (an H2CTermReq where
// the PDU is in error) within its PDU timeout (1 s here; the test waits 30
// times as long), complete the outstanding command with ErrQueueClosed,
// and never write outside the command's buffer.
func TestHostHostileController(t *testing.T) {
	const bound = time.Second
	cases := []struct {
		name  string
		write bool // the outstanding command is a write of 8 KiB (else a read)
		send  func(cid uint16) []byte
		fes   wire.FES // the H2CTermReq expected (0: none, the connection just ends)
	}{
		{"garbage", false, func(uint16) []byte { return bytes.Repeat([]byte{0xEE}, 64) }, wire.FESInvalidHeaderField},
		{"an H2CData from the controller", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeH2CData, wire.FlagLastPDU, cid, 0, 0, 512, make([]byte, 512))
		}, wire.FESInvalidHeaderField},
		{"PLEN shorter than the header", false, func(cid uint16) []byte {
			b := respPDU(cid, 0)
			binary.LittleEndian.PutUint32(b[4:], 10)
			return b
		}, wire.FESInvalidHeaderField},
		{"DATAL lies about the data", false, func(cid uint16) []byte {
			b := dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid, 0, 0, 4096, make([]byte, 512))
			return b
		}, wire.FESInvalidHeaderField},
		{"C2HData beyond the buffer", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid, 0, 8192-512, 1024, make([]byte, 1024))
		}, wire.FESDataOutOfRange},
		{"C2HData at a huge offset", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid, 0, 1<<31, 512, make([]byte, 512))
		}, wire.FESDataOutOfRange},
		{"C2HData for a write", true, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid, 0, 0, 512, make([]byte, 512))
		}, wire.FESInvalidHeaderField},
		{"C2HData for an unknown CID", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid^0x800, 0, 0, 512, make([]byte, 512))
		}, wire.FESInvalidHeaderField},
		{"SUCCESS before all the data", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU|wire.FlagSuccess, cid, 0, 0, 512, make([]byte, 512))
		}, wire.FESSequenceError},
		{"R2T beyond the command", true, func(cid uint16) []byte {
			return dataPDU(wire.TypeR2T, 0, cid, 1, 4096, 8192, nil)
		}, wire.FESDataOutOfRange},
		{"R2T for a read", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeR2T, 0, cid, 1, 0, 512, nil)
		}, wire.FESInvalidHeaderField},
		{"R2T of length 0", true, func(cid uint16) []byte {
			return dataPDU(wire.TypeR2T, 0, cid, 1, 0, 0, nil)
		}, wire.FESInvalidHeaderField},
		{"completion for an unknown CID", false, func(cid uint16) []byte { return respPDU(cid+1, 0) }, wire.FESInvalidHeaderField},
		{"a second ICResp", false, func(uint16) []byte { return wire.NewICResp(0, wire.Digests{}, 8192)[:] }, wire.FESSequenceError},
		{"stall mid-PDU", false, func(cid uint16) []byte {
			return dataPDU(wire.TypeC2HData, wire.FlagLastPDU, cid, 0, 0, 8192, make([]byte, 8192))[:wire.DataHLen+100]
		}, 0},
		{"stall in a header", false, func(cid uint16) []byte { return respPDU(cid, 0)[:10] }, 0},
		{"C2HTermReq", false, func(uint16) []byte {
			return wire.AppendTermReq(nil, wire.TypeC2HTermReq, wire.FESSequenceError, 0, make([]byte, 8))
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := newRawController(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var q *HostQueue
			dialed := make(chan error, 1)
			go func() {
				var err error
				q, err = Dial(ctx, "tcp", rc.ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8, PDUTimeout: bound, WriteTimeout: bound})
				dialed <- err
			}()
			c := <-rc.conn
			defer c.Close()
			if err := <-dialed; err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			// A guarded buffer: 8 KiB between two guard zones.
			mem := bytes.Repeat([]byte{0xA5}, 3*8192)
			buf := mem[8192:16384:16384]
			done := make(chan *nvmeof.HostRequest, 1)
			r := &nvmeof.HostRequest{Done: func(r *nvmeof.HostRequest) { done <- r }}
			rw(r, tc.write, 0, buf)
			if err := q.Submit(r); err != nil {
				t.Fatal(err)
			}
			sqe, _ := readCapsule(t, c)
			if _, err := c.Write(tc.send(sqe.CID())); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			select {
			case <-done:
			case <-time.After(30 * bound):
				t.Fatalf("the command is not completed %v after the PDU (bound %v)", 30*bound, bound)
			}
			select {
			case <-q.Done():
			case <-time.After(30 * bound):
				t.Fatalf("the queue is not closed %v after the PDU", 30*bound)
			}
			t.Logf("queue closed after %v: %v", time.Since(start), q.Err())
			if !errors.Is(r.Err, nvmeof.ErrQueueClosed) {
				t.Errorf("command error %v, want ErrQueueClosed", r.Err)
			}
			if !bytes.Equal(mem[:8192], bytes.Repeat([]byte{0xA5}, 8192)) || !bytes.Equal(mem[16384:], bytes.Repeat([]byte{0xA5}, 8192)) {
				t.Fatal("bytes outside the command's buffer changed")
			}
			// What the host sent after the capsule: an H2CTermReq or nothing.
			_ = c.SetReadDeadline(time.Now().Add(30 * bound))
			rest, _ := io.ReadAll(c)
			if tc.fes == 0 {
				if len(rest) != 0 {
					t.Errorf("%d bytes after the capsule, want none", len(rest))
				}
				return
			}
			tr, err := wire.ParseTermReq(rest, true)
			if err != nil {
				t.Fatalf("want an H2CTermReq, got %x: %v", rest, err)
			}
			if tr.FES() != tc.fes {
				t.Errorf("H2CTermReq FES %s, want %s", tr.FES(), tc.fes)
			}
		})
	}
}

// TestHostICResp: an ICResp that breaks TCP 1.0 §3.6.2.3 fails Dial.
func TestHostICResp(t *testing.T) {
	bad := func(f func(p *wire.ICResp)) *wire.ICResp {
		p := wire.NewICResp(0, wire.Digests{}, 8192)
		f(p)
		return p
	}
	cases := map[string]*wire.ICResp{
		"PFV 1":             bad(func(p *wire.ICResp) { p[8] = 1 }),
		"MAXH2CDATA 512":    bad(func(p *wire.ICResp) { binary.LittleEndian.PutUint32(p[12:], 512) }),
		"digests not asked": wire.NewICResp(0, wire.Digests{Header: true}, 8192),
		"CPDA 32":           bad(func(p *wire.ICResp) { p[10] = 32 }),
		"an ICReq":          bad(func(p *wire.ICResp) { p[0] = byte(wire.TypeICReq) }),
		"PLEN 129":          bad(func(p *wire.ICResp) { p[4] = 129 }),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			rc := newRawController(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q, err := Dial(ctx, "tcp", rc.ln.Addr().String(), HostConfig{QID: 1, PDUTimeout: time.Second})
			if err == nil {
				q.Close()
				t.Fatal("Dial succeeded")
			}
			t.Log(err)
		})
	}
	t.Run("no ICResp", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}
		}()
		_, err = Dial(context.Background(), "tcp", ln.Addr().String(), HostConfig{QID: 1, PDUTimeout: time.Second})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Dial: %v, want a deadline exceeded", err)
		}
	})
}

// TestHostC2HSuccess: a read completed by a C2HData with SUCCESS and no
// CapsuleResp (TCP 1.0 §3.6.2.7), and a data digest error that fails the
// command with a Data Transfer Error while the queue goes on.
func TestHostC2HSuccess(t *testing.T) {
	rc := newRawController(t, wire.NewICResp(0, wire.Digests{Data: true}, 8192))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dialed := make(chan *HostQueue, 1)
	go func() {
		q, err := Dial(ctx, "tcp", rc.ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8, Digests: wire.Digests{Data: true}})
		if err != nil {
			t.Error(err)
		}
		dialed <- q
	}()
	c := <-rc.conn
	defer c.Close()
	q := <-dialed
	if q == nil {
		t.FailNow()
	}
	defer q.Close()
	for _, corrupt := range []bool{false, true} {
		buf := make([]byte, 1024)
		done := make(chan struct{}, 1)
		r := &nvmeof.HostRequest{Done: func(*nvmeof.HostRequest) { done <- struct{}{} }}
		rw(r, false, 0, buf)
		if err := q.Submit(r); err != nil {
			t.Fatal(err)
		}
		sqe, _ := readCapsule(t, c)
		data := pattern(1024, 9)
		var pdu []byte
		for off := 0; off < 1024; off += 512 {
			flags := uint8(0)
			if off == 512 {
				flags = wire.FlagLastPDU | wire.FlagSuccess
			}
			b := make([]byte, wire.DataHLen)
			wire.PutDataHeader(b, wire.NewHeader(wire.TypeC2HData, flags, wire.Digests{Data: true}, 512, 0), sqe.CID(), 0, uint32(off), 512)
			b = append(b, data[off:off+512]...)
			dg := wire.DataDigest(0, data[off:off+512])
			if corrupt && off == 0 {
				dg++
			}
			b = binary.LittleEndian.AppendUint32(b, dg)
			pdu = append(pdu, b...)
		}
		if _, err := c.Write(pdu); err != nil {
			t.Fatal(err)
		}
		<-done
		if !corrupt {
			if err := r.Status(); err != nil || !bytes.Equal(buf, data) {
				t.Fatalf("read with SUCCESS: %v, data equal %v", err, bytes.Equal(buf, data))
			}
			continue
		}
		if st := r.CQE.Status(); r.Err != nil || st.Code() != nvmeof.StatusDataTransferError {
			t.Fatalf("data digest error: err %v status %v, want a data transfer error", r.Err, st)
		}
	}
	if st := q.Stats(); st.Success != 2 || st.DataDigestErrors != 1 {
		t.Errorf("stats %+v", st)
	}
}

// FuzzHostPDUs feeds arbitrary controller bytes to a host queue, over a
// real loopback connection, after a valid ICResp, with a read and a write
// of 8 KiB outstanding (CIDs 0x1000 and 0x1001): whatever the bytes, both
// commands complete and the queue ends or goes on, never a byte is written
// outside the read's buffer, and nothing panics or hangs.
func FuzzHostPDUs(f *testing.F) {
	data := make([]byte, 8192)
	f.Add(respPDU(0x1000, 0))
	f.Add(append(dataPDU(wire.TypeC2HData, wire.FlagLastPDU|wire.FlagSuccess, 0x1000, 0, 0, 8192, data), respPDU(0x1001, 0)...))
	f.Add(dataPDU(wire.TypeR2T, 0, 0x1001, 3, 0, 8192, nil))
	f.Add(dataPDU(wire.TypeR2T, 0, 0x1001, 3, 4096, 8192, nil))
	f.Add(dataPDU(wire.TypeC2HData, wire.FlagLastPDU, 0x1000, 0, 8000, 512, make([]byte, 512)))
	// Straight placement: a C2HData whose data runs past the read's
	// buffer, and one cut short in its data.
	f.Add(dataPDU(wire.TypeC2HData, wire.FlagLastPDU, 0x1000, 0, 4096, 8192, make([]byte, 8192)))
	f.Add(dataPDU(wire.TypeC2HData, wire.FlagLastPDU|wire.FlagSuccess, 0x1000, 0, 0, 8192, make([]byte, 3000)))
	f.Add(wire.AppendTermReq(nil, wire.TypeC2HTermReq, wire.FESInvalidHeaderField, 0, nil))
	f.Add([]byte{7, 0x0c, 24, 24, 255, 255, 255, 255})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ln.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
		defer cancel()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				accepted <- nil
				return
			}
			_ = c.SetDeadline(time.Now().Add(fuzzDeadline))
			var ic [wire.ICSize]byte
			if _, err := io.ReadFull(c, ic[:]); err == nil {
				_, _ = c.Write(wire.NewICResp(0, wire.Digests{}, 4096)[:])
			}
			accepted <- c
		}()
		// DirectMin 512: C2HData of 512 bytes and more is read straight
		// into place (rxReader.ReadData), so that the fuzzer exercises it.
		q, err := Dial(ctx, "tcp", ln.Addr().String(), HostConfig{QID: 1, QueueSize: 4, InlineDataSize: 4096, PDUTimeout: 200 * time.Millisecond, WriteTimeout: time.Second, DirectMin: 512})
		c := <-accepted
		if err != nil || c == nil {
			t.Skip(err)
		}
		defer c.Close()
		defer q.Close()
		mem := bytes.Repeat([]byte{0xA5}, 3*8192)
		done := make(chan struct{}, 2)
		rd := &nvmeof.HostRequest{Done: func(*nvmeof.HostRequest) { done <- struct{}{} }}
		wr := &nvmeof.HostRequest{Done: rd.Done}
		rw(rd, false, 0, mem[8192:16384:16384])
		rw(wr, true, 16, make([]byte, 8192))
		for _, r := range []*nvmeof.HostRequest{rd, wr} {
			if err := q.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		go func() { _, _ = io.Copy(io.Discard, c) }() // the capsules, H2CData, an H2CTermReq
		_, _ = c.Write(b)
		// The queue ends at our FIN if the commands are still outstanding
		// (the host's command timeouts would end it otherwise).
		_ = c.(*net.TCPConn).CloseWrite()
		for range 2 {
			select {
			case <-done:
			case <-time.After(fuzzDeadline):
				t.Fatalf("a command did not complete (input %x)", b)
			}
		}
		if !bytes.Equal(mem[:8192], bytes.Repeat([]byte{0xA5}, 8192)) || !bytes.Equal(mem[16384:], bytes.Repeat([]byte{0xA5}, 8192)) {
			t.Fatalf("bytes outside the read's buffer changed (input %x)", b)
		}
	})
}

// TestSubmitRacesConnectionEnd: the controller closes the connection
// while several goroutines submit, and every Done rewrites its request at
// once (as the multipath layer retires a command and fails it over to
// another queue). Under the race detector (make test) this finds a
// Submit that still reads or writes a request the receive goroutine can
// already have completed: before Submit published the request last, it
// set the CID and the SGL and read the data after (the race the CI found
// in initiator TestMultipathRDMAAndTCP, in about one run of ten).
func TestSubmitRacesConnectionEnd(t *testing.T) {
	for round := range 20 {
		rc := newRawController(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		q, err := Dial(ctx, "tcp", rc.ln.Addr().String(), HostConfig{QID: 1, QueueSize: 32, InlineDataSize: 8192})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c := <-rc.conn
		// The controller completes each capsule at once and goes away
		// after a few, with commands in flight and more being submitted.
		go func() {
			defer c.Close()
			var hb [wire.CapsuleCmdHLen]byte
			for i := range 8 + round*3 {
				if _, err := io.ReadFull(c, hb[:]); err != nil {
					return
				}
				h, _ := wire.ParseHeader(hb[:])
				if _, err := io.CopyN(io.Discard, c, int64(h.PLen)-wire.CapsuleCmdHLen); err != nil {
					return
				}
				resp := respPDU(wire.CapsuleSQE(hb[:]).CID(), nvmeof.StatusSuccess)
				wire.CapsuleCQE(resp).SetSQHead(uint16((i + 1) % 32))
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}()
		const submitters = 4
		errs := make(chan error, submitters)
		for s := range submitters {
			go func() {
				done := make(chan struct{}, 1)
				r := &nvmeof.HostRequest{}
				r.Done = func(r *nvmeof.HostRequest) {
					// What a retire does: the request is the caller's again.
					r.SQE = nvmeof.SQE{}
					r.Data = nil
					done <- struct{}{}
				}
				buf := make([]byte, 4096)
				for n := 0; ; n++ {
					rw(r, true, uint64(s*64+n%64), buf)
					if err := q.Submit(r); err != nil {
						if !errors.Is(err, nvmeof.ErrQueueClosed) && !errors.Is(err, nvmeof.ErrQueueFull) {
							errs <- err
							return
						}
						if errors.Is(err, nvmeof.ErrQueueClosed) {
							errs <- nil
							return
						}
						continue
					}
					<-done
				}
			}()
		}
		for range submitters {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		q.Close()
	}
}
