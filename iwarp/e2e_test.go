package iwarp

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestSendRecv(t *testing.T) {
	for _, crc := range []CRCPolicy{CRCOff, CRCOffered} {
		for _, size := range []int{0, 1, 16, 64, 1000, 4096, 65000, 200000, 1 << 20} {
			t.Run(fmt.Sprintf("crc=%v/size=%d", crc, size), func(t *testing.T) {
				rbuf := make([]byte, 1<<20)
				cli, srv := pair(t, pairOpts{clientCfg: &Config{CRC: crc}, serverRecvs: [][]byte{rbuf}})
				if cli.qp.CRC() != (crc != CRCOff) || srv.qp.CRC() != cli.qp.CRC() {
					t.Fatalf("crc client %v server %v", cli.qp.CRC(), srv.qp.CRC())
				}
				msg := pattern(size, 3)
				if err := cli.qp.PostSend(&SendWR{ID: 7, Opcode: WRSend, Signaled: true, Local: [][]byte{msg}}); err != nil {
					t.Fatal(err)
				}
				wc := waitOK(t, cli.cq)
				if wc.ID != 7 || wc.Opcode != WCSend || wc.ByteLen != size {
					t.Fatalf("send wc %+v", wc)
				}
				wc = waitOK(t, srv.rcq)
				if wc.ID != 0 || wc.Opcode != WCRecv || wc.ByteLen != size {
					t.Fatalf("recv wc %+v", wc)
				}
				if !bytes.Equal(rbuf[:size], msg) {
					t.Fatal("data mismatch")
				}
			})
		}
	}
}

func TestGatherSend(t *testing.T) {
	rbuf := make([]byte, 300000)
	cli, srv := pair(t, pairOpts{serverRecvs: [][]byte{rbuf}})
	parts := [][]byte{pattern(64, 1), pattern(3, 2), pattern(100000, 3), pattern(0, 0), pattern(170000, 4), pattern(5, 5)}
	if err := cli.qp.PostSend(&SendWR{Opcode: WRSendSE, Local: parts}); err != nil {
		t.Fatal(err)
	}
	wc := waitOK(t, srv.rcq)
	want := bytes.Join(parts, nil)
	if wc.ByteLen != len(want) || !wc.Solicited || !bytes.Equal(rbuf[:len(want)], want) {
		t.Fatalf("wc %+v, data equal %v", wc, bytes.Equal(rbuf[:len(want)], want))
	}
}

func TestWriteAndRead(t *testing.T) {
	// Each size with CRC off and required, with both receive loops parking
	// in the poller (busy poll 0) and spinning first (Config.BusyPoll, the
	// low-latency mode of nvmetd and nvmeof).
	for _, bp := range []time.Duration{0, 50 * time.Microsecond} {
		for _, crc := range []CRCPolicy{CRCOff, CRCRequired} {
			for _, size := range []int{0, 1, 4096, 65536, 1 << 20, 3<<20 + 5} {
				t.Run(fmt.Sprintf("busypoll=%v/crc=%v/size=%d", bp, crc, size), func(t *testing.T) {
					testWriteAndRead(t, pairOpts{serverCfg: &Config{CRC: crc, BusyPoll: bp}, clientCfg: &Config{CRC: crc, BusyPoll: bp},
						serverRecvs: [][]byte{make([]byte, 8)}}, size)
				})
			}
		}
	}
}

// testWriteAndRead RDMA-Writes size bytes into the server's memory and
// RDMA-Reads them back, checking the data and its bounds.
func testWriteAndRead(t *testing.T, o pairOpts, size int) {
	cli, srv := pair(t, o)
	// Server memory, exposed for remote read and write.
	remote := pattern(size+100, 9)
	mr, err := srv.pd.RegisterMemory(remote, AccessRemoteRead|AccessRemoteWrite|AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := pattern(size, 42)
	if err := cli.qp.PostSend(&SendWR{ID: 1, Opcode: WRWrite, Signaled: true, Local: [][]byte{src}, RemoteSTag: mr.STag(), RemoteTO: mr.IOVA() + 50}); err != nil {
		t.Fatal(err)
	}
	waitOK(t, cli.cq)
	// A Send behind the Write tells the server its data is placed
	// (what the race detector can see; TCP ordering does it).
	if err := cli.qp.PostSend(&SendWR{Opcode: WRSend}); err != nil {
		t.Fatal(err)
	}
	waitOK(t, srv.rcq)
	if !bytes.Equal(remote[50:50+size], src) {
		t.Fatal("written data mismatch")
	}
	// Read it back.
	sink := make([]byte, size+8)
	smr, err := cli.pd.RegisterMemory(sink, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.PostSend(&SendWR{ID: 2, Opcode: WRRead, Signaled: true, RemoteSTag: mr.STag(), RemoteTO: mr.IOVA() + 50, SinkMR: smr, SinkOffset: 8, Length: uint32(size)}); err != nil {
		t.Fatal(err)
	}
	wc := waitOK(t, cli.cq)
	if wc.ID != 2 || wc.Opcode != WCRead || wc.ByteLen != size {
		t.Fatalf("read wc %+v", wc)
	}
	if !bytes.Equal(sink[8:], src) {
		t.Fatal("data mismatch")
	}
	if !bytes.Equal(remote[:50], pattern(size+100, 9)[:50]) || !bytes.Equal(remote[50+size:], pattern(size+100, 9)[50+size:]) {
		t.Fatal("write outside its range")
	}
}

func TestManyReadsBeyondORD(t *testing.T) {
	cli, srv := pair(t, pairOpts{client: QPAttr{ORD: 2, SendDepth: 256}, server: QPAttr{IRD: 4}})
	if cli.qp.ORD() != 2 || srv.qp.IRD() != 4 {
		t.Fatalf("client ORD %d server IRD %d", cli.qp.ORD(), srv.qp.IRD())
	}
	remote := pattern(1<<20, 1)
	mr, _ := srv.pd.RegisterMemory(remote, AccessRemoteRead)
	sink := make([]byte, 1<<20)
	smr, _ := cli.pd.RegisterMemory(sink, AccessLocalWrite)
	const n = 200
	chunk := len(remote) / n
	for i := 0; i < n; i++ {
		if err := cli.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRead, Signaled: true, RemoteSTag: mr.STag(), RemoteTO: mr.IOVA() + uint64(i*chunk), SinkMR: smr, SinkOffset: uint64(i * chunk), Length: uint32(chunk)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if wc := waitOK(t, cli.cq); wc.ID != uint64(i) {
			t.Fatalf("completion %d for read %d", wc.ID, i)
		}
	}
	if !bytes.Equal(sink[:n*chunk], remote[:n*chunk]) {
		t.Fatal("data mismatch")
	}
}

func TestSendWithInvalidate(t *testing.T) {
	rbuf := make([]byte, 64)
	cli, srv := pair(t, pairOpts{clientRecvs: [][]byte{rbuf, make([]byte, 64)}, serverRecvs: [][]byte{make([]byte, 64)}})
	// RFC 5044 §7.1.2: the responder is silent until the initiator's first
	// FPDU; here it is a Send.
	if err := cli.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{[]byte("go")}}); err != nil {
		t.Fatal(err)
	}
	waitOK(t, srv.rcq)
	buf := make([]byte, 4096)
	mr, _ := cli.pd.RegisterMemory(buf, AccessLocalWrite|AccessRemoteWrite)
	stag := mr.STag()
	// The server writes into the client's buffer, then invalidates it.
	if err := srv.qp.PostSend(&SendWR{Opcode: WRWrite, Local: [][]byte{pattern(4096, 1)}, RemoteSTag: stag, RemoteTO: mr.IOVA()}); err != nil {
		t.Fatal(err)
	}
	if err := srv.qp.PostSend(&SendWR{ID: 5, Opcode: WRSendInv, Signaled: true, Local: [][]byte{[]byte("done")}, InvalidateSTag: stag}); err != nil {
		t.Fatal(err)
	}
	wc := waitOK(t, cli.rcq)
	if !wc.Invalidated || wc.InvalidatedSTag != stag || wc.ByteLen != 4 {
		t.Fatalf("wc %+v", wc)
	}
	if mr.Valid() {
		t.Fatal("MR still valid after remote invalidation")
	}
	if !bytes.Equal(buf, pattern(4096, 1)) {
		t.Fatal("data")
	}
	// Re-register with a new key: the old STag is dead, the new one works.
	newSTag, err := mr.Reregister(buf, mr.IOVA(), AccessLocalWrite|AccessRemoteWrite, uint8(stag)+1)
	if err != nil || newSTag == stag {
		t.Fatalf("reregister: %x %v", newSTag, err)
	}
	if err := srv.qp.PostSend(&SendWR{Opcode: WRWrite, Local: [][]byte{pattern(16, 7)}, RemoteSTag: newSTag, RemoteTO: mr.IOVA()}); err != nil {
		t.Fatal(err)
	}
	if err := srv.qp.PostSend(&SendWR{Opcode: WRSendSEInv, Local: [][]byte{[]byte("x")}, InvalidateSTag: newSTag}); err != nil {
		t.Fatal(err)
	}
	wc = waitOK(t, cli.rcq)
	if !wc.Invalidated || !wc.Solicited || !bytes.Equal(buf[:16], pattern(16, 7)) {
		t.Fatalf("second wc %+v", wc)
	}
}

func TestPrivateDataAndIRDORD(t *testing.T) {
	cli, srv := pair(t, pairOpts{
		client:   QPAttr{IRD: 128, ORD: 0 + 1},
		server:   QPAttr{IRD: 1, ORD: 128},
		clientPD: []byte("hello from the initiator"),
		serverPD: []byte("welcome"),
	})
	if string(srv.qp.PeerPrivateData()) != "hello from the initiator" || string(cli.qp.PeerPrivateData()) != "welcome" {
		t.Fatalf("private data %q %q", srv.qp.PeerPrivateData(), cli.qp.PeerPrivateData())
	}
	// Server ORD is capped by the client's IRD (128), server IRD raised to
	// the client's ORD; the client takes the reply's values.
	if srv.qp.ORD() != 128 || srv.qp.IRD() != 1 || cli.qp.IRD() != 128 || cli.qp.ORD() != 1 {
		t.Fatalf("server ird/ord %d/%d client %d/%d", srv.qp.IRD(), srv.qp.ORD(), cli.qp.IRD(), cli.qp.ORD())
	}
}

func TestManyQPs(t *testing.T) {
	const n = 32
	type conn struct{ cli, srv *side }
	var cs []conn
	for i := 0; i < n; i++ {
		bufs := make([][]byte, 8)
		for j := range bufs {
			bufs[j] = make([]byte, 70000)
		}
		c, s := pair(t, pairOpts{serverRecvs: bufs})
		cs = append(cs, conn{c, s})
	}
	for i, c := range cs {
		for j := 0; j < 8; j++ {
			msg := pattern(1000*j+i, byte(i))
			if err := c.cli.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{msg}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range cs {
		for j := 0; j < 8; j++ {
			wc := waitOK(t, c.srv.rcq)
			if wc.ID != uint64(j) || wc.ByteLen != 1000*j+i {
				t.Fatalf("qp %d msg %d: %+v", i, j, wc)
			}
		}
	}
}

// TestConfigLoggerReachesQP: the logger of the Config a connection is made
// with logs the QP's events (here: the nudge of a silent responder).
func TestConfigLoggerReachesQP(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ln, err := Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := newSide(t, QPAttr{})
	go func() {
		req, err := ln.Accept(context.Background())
		if err == nil {
			_ = req.Accept(srv.qp, nil) // no receive posted: the Send below is never answered
		}
	}()
	cli := newSide(t, QPAttr{})
	if err := Dial(context.Background(), "tcp", ln.Addr().String(), cli.qp, nil, &Config{Logger: zap.New(core), Nudge: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	defer srv.qp.Close()
	defer cli.qp.Close()
	_ = cli.qp.PostSend(&SendWR{Opcode: WRWrite, Local: [][]byte{nil}, RemoteSTag: 0})
	deadline := time.Now().Add(hang)
	for logs.FilterMessageSnippet("nudging").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no nudge logged; logs: %v", logs.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSocketBuffers: Config.SocketSendBuffer and SocketReceiveBuffer reach
// both ends' sockets (the kernel caps them at net.core.wmem_max/rmem_max
// and reports twice the value set, socket(7)).
func TestSocketBuffers(t *testing.T) {
	sysMax := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/core/" + name)
		if err != nil {
			t.Skipf("cannot read the kernel's cap: %v", err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	wantSnd, wantRcv := 2*min(1<<20, sysMax("wmem_max")), 2*min(768<<10, sysMax("rmem_max"))
	cfg := &Config{SocketSendBuffer: 1 << 20, SocketReceiveBuffer: 768 << 10}
	cli, srv := pair(t, pairOpts{clientCfg: cfg, serverCfg: cfg})
	for _, s := range []*side{cli, srv} {
		var snd, rcv int
		var err error
		if cerr := s.qp.raw.Control(func(fd uintptr) {
			if snd, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF); err != nil {
				return
			}
			rcv, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		}); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
		if snd != wantSnd || rcv != wantRcv {
			t.Errorf("SO_SNDBUF %d, SO_RCVBUF %d; want %d and %d", snd, rcv, wantSnd, wantRcv)
		}
	}
}
