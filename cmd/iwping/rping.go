package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/iwarp"
)

// The rping exchange (librdmacm/examples/rping.c), per ping:
//
//	client: Send {start_buf addr, rkey, size}        (read advertisement)
//	server: RDMA Read of the client's start_buf into its rdma_buf
//	server: Send "go ahead" (16 bytes)
//	client: Send {rdma_buf addr, rkey, size}         (write advertisement)
//	server: RDMA Write of strlen(rdma_buf)+1 bytes into the client's rdma_buf
//	server: Send "go ahead"
//	client: compares start_buf and rdma_buf (-V) and prints (-v)
//
// The advertisement is struct rping_rdma_info: be64 buf, be32 rkey, be32 size.

const (
	infoLen = 16
	// rping's limits: RPING_MIN_BUFSIZE = sizeof("2147483647") +
	// sizeof("rdma-ping-%d: ") and RPING_BUFSIZE-1.
	rpingMinSize = 11 + 15
	rpingMaxSize = 64*1024 - 1
	// ourMaxSize is iwping's own limit, for iwping against itself.
	ourMaxSize = 16 << 20
	// rping connects and accepts with responder_resources = initiator_depth = 1.
	rpingIRDORD = 1
)

type options struct {
	server     bool
	addr       string
	source     string
	port       int
	count      int
	size       int
	verbose    bool
	validate   bool
	persistent bool
	cfg        iwarp.Config
	log        *zap.Logger
}

func (o *options) hostPort() string {
	return net.JoinHostPort(o.addr, strconv.Itoa(o.port))
}

type rdmaInfo struct {
	buf  uint64
	rkey uint32
	size uint32
}

func (i rdmaInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], i.buf)
	binary.BigEndian.PutUint32(b[8:12], i.rkey)
	binary.BigEndian.PutUint32(b[12:16], i.size)
}

func getInfo(b []byte) rdmaInfo {
	return rdmaInfo{binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint32(b[8:12]), binary.BigEndian.Uint32(b[12:16])}
}

// conn is one rping connection's verbs resources.
type conn struct {
	pd      *iwarp.PD
	cq      *iwarp.CQ
	qp      *iwarp.QP
	recvBuf []byte
	sendBuf []byte
	rdmaBuf []byte
	rdmaMR  *iwarp.MR
	wcs     [8]iwarp.WC
}

func newConn(size int) (*conn, error) {
	c := &conn{pd: iwarp.NewPD(), cq: iwarp.NewCQ(32), recvBuf: make([]byte, infoLen), sendBuf: make([]byte, infoLen), rdmaBuf: make([]byte, size)}
	var err error
	c.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: c.pd, SendCQ: c.cq, RecvCQ: c.cq, SendDepth: 16, RecvDepth: 2, IRD: rpingIRDORD, ORD: rpingIRDORD})
	if err != nil {
		return nil, err
	}
	c.rdmaMR, err = c.pd.RegisterMemory(c.rdmaBuf, iwarp.AccessLocalWrite|iwarp.AccessRemoteRead|iwarp.AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	if err := c.postRecv(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *conn) postRecv() error { return c.qp.PostRecv(&iwarp.RecvWR{Buf: c.recvBuf}) }

func (c *conn) send() error {
	return c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Signaled: true, Local: [][]byte{c.sendBuf}})
}

// errDisconnected is the peer ending the session between pings.
var errDisconnected = errors.New("disconnected")

// await waits for the completion of the given kind, passing others (as
// rping's completion handler does). A received message must be exactly an
// rping_rdma_info; its buffer is reposted.
func (c *conn) await(ctx context.Context, want iwarp.WCOpcode) (int, error) {
	for {
		n, err := c.cq.PollWait(ctx, c.wcs[:1])
		if err != nil {
			return 0, err
		}
		for _, wc := range c.wcs[:n] {
			if wc.Status == iwarp.WCFlushErr {
				if qerr := c.qp.Err(); qerr != nil && !errors.Is(qerr, iwarp.ErrPeerClosed) {
					return 0, fmt.Errorf("connection failed: %w", qerr)
				}
				return 0, errDisconnected
			}
			if wc.Status != iwarp.WCSuccess {
				return 0, fmt.Errorf("cq completion failed status %v: %v", wc.Status, c.qp.Err())
			}
			if wc.Opcode != want {
				continue
			}
			if wc.Opcode == iwarp.WCRecv {
				if wc.ByteLen != infoLen {
					return 0, fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
				}
				if err := c.postRecv(); err != nil {
					return 0, fmt.Errorf("post recv error: %w", err)
				}
			}
			return wc.ByteLen, nil
		}
	}
}

// fillPing writes rping's ping text: "rdma-ping-N: " then letters from
// 'A'+N (wrapping 'z' to 'A'), NUL-terminated.
func fillPing(b []byte, ping int, start byte) {
	cc := copy(b, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := start
	for i := cc; i < len(b); i++ {
		b[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// runClient runs rping's client side.
func runClient(ctx context.Context, o *options, out io.Writer) error {
	c, err := newConn(o.size)
	if err != nil {
		return err
	}
	start := make([]byte, o.size)
	startMR, err := c.pd.RegisterMemory(start, iwarp.AccessLocalWrite|iwarp.AccessRemoteRead|iwarp.AccessRemoteWrite)
	if err != nil {
		return err
	}
	cfg := o.cfg
	cfg.Logger = o.log
	if o.source != "" {
		o.log.Debug("source address binding is not needed over TCP; using the route's address", zap.String("source", o.source))
	}
	if err := iwarp.Dial(ctx, "tcp", o.hostPort(), c.qp, nil, &cfg); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer c.qp.Close()
	o.log.Debug("connected", zap.Stringer("remote", c.qp.RemoteAddr()), zap.Int("ird", c.qp.IRD()), zap.Int("ord", c.qp.ORD()), zap.Bool("crc", c.qp.CRC()))
	letter := byte(65)
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		fillPing(start, ping, letter)
		letter++
		if letter > 122 {
			letter = 65
		}
		rdmaInfo{startMR.IOVA(), startMR.STag(), uint32(o.size)}.put(c.sendBuf)
		if err := c.send(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := c.await(ctx, iwarp.WCRecv); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_ADV: %w", err)
		}
		rdmaInfo{c.rdmaMR.IOVA(), c.rdmaMR.STag(), uint32(o.size)}.put(c.sendBuf)
		if err := c.send(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := c.await(ctx, iwarp.WCRecv); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_COMPLETE: %w", err)
		}
		if o.validate && !bytes.Equal(start, c.rdmaBuf) {
			return errors.New("data mismatch!")
		}
		if o.verbose {
			fmt.Fprintf(out, "ping data: %s\n", cstring(c.rdmaBuf))
		}
	}
	return nil
}

// serveConn runs rping's server side on an accepted request.
func serveConn(ctx context.Context, o *options, req *iwarp.ConnRequest, out io.Writer) error {
	c, err := newConn(o.size)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	if err := req.Accept(c.qp, nil); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.qp.Close()
	o.log.Debug("accepted", zap.Stringer("remote", c.qp.RemoteAddr()), zap.Int("ird", c.qp.IRD()), zap.Int("ord", c.qp.ORD()), zap.Bool("crc", c.qp.CRC()))
	// As rping's server, serve pings until the client disconnects (-C
	// is for the client).
	for {
		if _, err := c.await(ctx, iwarp.WCRecv); err != nil {
			if errors.Is(err, errDisconnected) {
				return nil
			}
			return fmt.Errorf("wait for RDMA_READ_ADV: %w", err)
		}
		adv := getInfo(c.recvBuf)
		if int(adv.size) > len(c.rdmaBuf) {
			return fmt.Errorf("client advertises %d bytes, larger than the %d-byte buffer (-S)", adv.size, len(c.rdmaBuf))
		}
		if err := c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRRead, Signaled: true, RemoteSTag: adv.rkey, RemoteTO: adv.buf, SinkMR: c.rdmaMR, Length: adv.size}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := c.await(ctx, iwarp.WCRead); err != nil {
			return fmt.Errorf("wait for RDMA_READ_COMPLETE: %w", err)
		}
		if o.verbose {
			fmt.Fprintf(out, "server ping data: %s\n", cstring(c.rdmaBuf))
		}
		if err := c.send(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := c.await(ctx, iwarp.WCRecv); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_ADV: %w", err)
		}
		adv = getInfo(c.recvBuf)
		n := len(cstring(c.rdmaBuf)) + 1
		if n > len(c.rdmaBuf) {
			n = len(c.rdmaBuf)
		}
		if err := c.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRWrite, Signaled: true, Local: [][]byte{c.rdmaBuf[:n]}, RemoteSTag: adv.rkey, RemoteTO: adv.buf}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := c.await(ctx, iwarp.WCWrite); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_COMPLETE: %w", err)
		}
		if err := c.send(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
	}
}

// runServer listens and serves one connection, or every connection with
// -P (each in its own goroutine).
func runServer(ctx context.Context, o *options, out io.Writer, ready func(net.Addr)) error {
	cfg := o.cfg
	cfg.Logger = o.log
	addr := o.addr
	if addr == "" {
		addr = "0.0.0.0"
	}
	ln, err := iwarp.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(o.port)), &cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	if ready != nil {
		ready(ln.Addr())
	}
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		if !o.persistent {
			if err := serveConn(ctx, o, req, out); err != nil {
				return fmt.Errorf("rping server failed: %w", err)
			}
			return nil
		}
		go func() {
			if err := serveConn(ctx, o, req, out); err != nil {
				o.log.Warn("connection failed", zap.Stringer("remote", req.RemoteAddr), zap.Error(err))
			}
		}()
	}
}
