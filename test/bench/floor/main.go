// Command floor measures the physical floor of the sleeping data path on
// this machine (issue 25): two processes, each pinned to one core, ping-pong
// the bytes of one 4 KiB NVMe/TCP read over loopback TCP with blocking reads
// and no busy polling. The host sends a CapsuleCmd PDU (72 bytes); the
// target answers with a C2HData PDU header and 4 KiB of data and a
// CapsuleResp PDU (24 + 4096 + 24 bytes) in one writev, as nvmetd's NVMe/TCP
// port does. Nothing is parsed: the floor is the kernel's loopback TCP and
// two wake-ups per round trip.
//
//	floor serve -addr 127.0.0.1:4599 -mode syscall
//	floor ping  -addr 127.0.0.1:4599 -mode syscall -n 200000
//
// test/bench/floor.sh runs both pinned (taskset, GOMAXPROCS=1) in both modes:
// syscall (read(2)/writev(2) on a blocking socket: the thread sleeps in the
// kernel, one wake-up per message, the lowest a process can do) and netpoll
// (Go's net.Conn: the goroutine parks and the runtime's netpoller wakes it,
// as in nvmetd).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	reqLen  = 72             // CapsuleCmd PDU: 8-byte common header + 64-byte SQE
	respLen = 24 + 4096 + 24 // C2HData header + data + CapsuleResp PDU
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: floor serve|ping [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:4599", "loopback address")
	mode := fs.String("mode", "syscall", "syscall (blocking read(2)) or netpoll (Go net.Conn)")
	n := fs.Int("n", 200000, "round trips (ping)")
	warm := fs.Int("warm", 5000, "round trips before measuring (ping)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(*addr, *mode)
	case "ping":
		err = ping(*addr, *mode, *n, *warm)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// conn is one side's socket: a blocking file descriptor (syscall mode) or a
// net.Conn (netpoll mode).
type conn struct {
	fd int
	c  net.Conn
}

func wrap(c *net.TCPConn, mode string) (*conn, error) {
	if err := c.SetNoDelay(true); err != nil {
		return nil, err
	}
	if mode == "netpoll" {
		return &conn{fd: -1, c: c}, nil
	}
	if mode != "syscall" {
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	f, err := c.File() // a dup, in blocking mode
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	fd := int(f.Fd())
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	return &conn{fd: fd}, nil
}

func (c *conn) readFull(b []byte) error {
	if c.c != nil {
		_, err := io.ReadFull(c.c, b)
		return err
	}
	for len(b) > 0 {
		n, err := unix.Read(c.fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		b = b[n:]
	}
	return nil
}

func (c *conn) writev(iov [][]byte) error {
	if c.c != nil {
		bufs := net.Buffers(append([][]byte(nil), iov...))
		_, err := bufs.WriteTo(c.c)
		return err
	}
	total := 0
	for _, b := range iov {
		total += len(b)
	}
	for total > 0 {
		n, err := unix.Writev(c.fd, iov)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		total -= n
		for n > 0 {
			if n >= len(iov[0]) {
				n -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][n:]
				n = 0
			}
		}
	}
	return nil
}

func serve(addr, mode string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		c, err := wrap(nc.(*net.TCPConn), mode)
		if err != nil {
			return err
		}
		req := make([]byte, reqLen)
		hdr, data, resp := make([]byte, 24), make([]byte, 4096), make([]byte, 24)
		for {
			if err := c.readFull(req); err != nil {
				break
			}
			if err := c.writev([][]byte{hdr, data, resp}); err != nil {
				break
			}
		}
	}
}

type result struct {
	Mode       string  `json:"mode"`
	RoundTrips int     `json:"round_trips"`
	IOPS       float64 `json:"iops"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p99_9_us"`
	MeanUs     float64 `json:"mean_us"`
}

func ping(addr, mode string, n, warm int) error {
	var nc net.Conn
	var err error
	for i := 0; i < 100; i++ { // the server may still be starting
		if nc, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	c, err := wrap(nc.(*net.TCPConn), mode)
	if err != nil {
		return err
	}
	req, resp := make([]byte, reqLen), make([]byte, respLen)
	lat := make([]time.Duration, n)
	var start time.Time
	for i := -warm; i < n; i++ {
		if i == 0 {
			start = time.Now()
		}
		t0 := time.Now()
		if err := c.writev([][]byte{req}); err != nil {
			return err
		}
		if err := c.readFull(resp); err != nil {
			return err
		}
		if i >= 0 {
			lat[i] = time.Since(t0)
		}
	}
	el := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	us := func(q float64) float64 { return float64(lat[int(q*float64(n-1))]) / 1e3 }
	r := result{Mode: mode, RoundTrips: n, IOPS: float64(n) / el.Seconds(), P50us: us(0.5), P99us: us(0.99), P999us: us(0.999),
		MeanUs: float64(el) / float64(n) / 1e3}
	return json.NewEncoder(os.Stdout).Encode(r)
}
