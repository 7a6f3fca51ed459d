package iwarp

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

var benchSizes = []int{64 << 10, 256 << 10, 1 << 20}

// window is how many operations a benchmark keeps in flight.
const window = 16

// runWindowed keeps window operations outstanding: post(i) starts op i and
// each completion on cq ends one.
func runWindowed(b *testing.B, cq *CQ, post func(i int)) {
	ctx := context.Background()
	var wcs [window]WC
	inflight := 0
	for i := 0; i < b.N; i++ {
		for inflight >= window {
			n, err := cq.PollWait(ctx, wcs[:])
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != WCSuccess {
					b.Fatalf("completion %v", wc.Status)
				}
			}
			inflight -= n
		}
		post(i)
		inflight++
	}
	for inflight > 0 {
		n, err := cq.PollWait(ctx, wcs[:])
		if err != nil {
			b.Fatal(err)
		}
		inflight -= n
	}
}

// BenchmarkPlacement measures where received payloads are placed from:
// RDMA Writes of 4 KiB and 128 KiB with the default read-ahead buffer
// (256 KiB: one read brings many FPDUs, and payloads that came with their
// header are copied out of it) and with the smallest one (4 KiB: reads
// mostly stop before a payload, which the next read places straight into
// registered memory). copied-% is the share of payload bytes copied.
func BenchmarkPlacement(b *testing.B) {
	for _, ra := range []int{0, 4096} {
		for _, size := range []int{4 << 10, 128 << 10} {
			name := fmt.Sprintf("readahead=%dKiB/%dKiB", max(ra, defaultReadBuffer)>>10, size>>10)
			if ra != 0 {
				name = fmt.Sprintf("readahead=%dKiB/%dKiB", ra>>10, size>>10)
			}
			b.Run(name, func(b *testing.B) {
				cli, srv := pair(b, pairOpts{client: QPAttr{SendDepth: 2 * window}, serverCfg: &Config{ReadBuffer: ra}})
				remote := make([]byte, size*window)
				mr, _ := srv.pd.RegisterMemory(remote, AccessRemoteWrite)
				local := [][]byte{pattern(size, 1)}
				wr := SendWR{Opcode: WRWrite, Signaled: true, Local: local, RemoteSTag: mr.STag()}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				runWindowed(b, cli.cq, func(i int) {
					wr.RemoteTO = mr.IOVA() + uint64(i%window*size)
					if err := cli.qp.PostSend(&wr); err != nil {
						b.Fatal(err)
					}
				})
				b.StopTimer()
				st := srv.qp.Stats()
				if t := st.PayloadCopied + st.PayloadDirect; t > 0 {
					b.ReportMetric(100*float64(st.PayloadCopied)/float64(t), "copied-%")
				}
			})
		}
	}
}

func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			cli, srv := pair(b, pairOpts{client: QPAttr{SendDepth: 2 * window}})
			remote := make([]byte, size)
			mr, _ := srv.pd.RegisterMemory(remote, AccessRemoteWrite)
			src := pattern(size, 1)
			wr := SendWR{Opcode: WRWrite, Signaled: true, Local: [][]byte{src}, RemoteSTag: mr.STag(), RemoteTO: mr.IOVA()}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			runWindowed(b, cli.cq, func(i int) {
				if err := cli.qp.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func BenchmarkRDMARead(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			cli, srv := pair(b, pairOpts{client: QPAttr{SendDepth: 2 * window, ORD: window}, server: QPAttr{IRD: window}})
			remote := pattern(size, 1)
			mr, _ := srv.pd.RegisterMemory(remote, AccessRemoteRead)
			sink := make([]byte, size)
			smr, _ := cli.pd.RegisterMemory(sink, AccessLocalWrite)
			wr := SendWR{Opcode: WRRead, Signaled: true, RemoteSTag: mr.STag(), RemoteTO: mr.IOVA(), SinkMR: smr, Length: uint32(size)}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			runWindowed(b, cli.cq, func(i int) {
				if err := cli.qp.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func BenchmarkSend(b *testing.B) {
	for _, size := range append([]int{64}, benchSizes...) {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			benchSend(b, size)
		})
	}
}

func benchSend(b *testing.B, size int) {
	ln, err := Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const nbuf = 2 * window
	recvBufs := make([][]byte, nbuf)
	for i := range recvBufs {
		recvBufs[i] = make([]byte, size)
	}
	spd := NewPD()
	var sqp *QP
	// The server's receive CQ reposts each buffer from the receive loop, so
	// it never runs out, and gives the client one credit per message
	// received through an in-process channel (no credit messages on the
	// wire: one-way throughput, comparable to BenchmarkTCPStream).
	credits := make(chan struct{}, 1<<20)
	rcq := NewCQHandler(func(wc *WC) {
		if wc.Status != WCSuccess {
			return
		}
		_ = sqp.PostRecv(&RecvWR{ID: wc.ID, Buf: recvBufs[wc.ID]})
		credits <- struct{}{}
	})
	sqp, _ = NewQP(QPAttr{PD: spd, SendCQ: NewCQ(16), RecvCQ: rcq, RecvDepth: nbuf})
	for i := range recvBufs {
		_ = sqp.PostRecv(&RecvWR{ID: uint64(i), Buf: recvBufs[i]})
	}
	go func() {
		req, err := ln.Accept(context.Background())
		if err == nil {
			_ = req.Accept(sqp, nil)
		}
	}()
	cli := newSide(b, QPAttr{SendDepth: 2 * nbuf})
	if err := Dial(context.Background(), "tcp", ln.Addr().String(), cli.qp, nil, nil); err != nil {
		b.Fatal(err)
	}
	defer func() { cli.qp.Close(); sqp.Close() }()
	msg := pattern(size, 3)
	wr := SendWR{Opcode: WRSend, Local: [][]byte{msg}}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		for inflight >= nbuf {
			<-credits
			inflight--
		}
		if err := cli.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		<-credits
	}
}

// BenchmarkTCPStream is the baseline: the same sizes written over a plain
// loopback TCP connection and read into a buffer by another goroutine.
func BenchmarkTCPStream(b *testing.B) {
	for _, size := range append([]int{64}, benchSizes...) {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			total := int64(b.N) * int64(size)
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				buf := make([]byte, max(size, 256<<10))
				var got int64
				for got < total {
					n, err := c.Read(buf)
					got += int64(n)
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := pattern(size, 1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err != nil && err != io.EOF {
					b.Fatal(err)
				}
			case <-time.After(time.Minute):
				b.Fatal("reader stuck")
			}
		})
	}
}
