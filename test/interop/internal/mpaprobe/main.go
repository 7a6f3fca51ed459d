// Command mpaprobe opens an iWARP connection the way an RFC 6581 peer-to-peer
// initiator does, up to the MPA Reply, and then resets the TCP connection
// instead of sending its ready-to-receive (RTR) message. The interop tests
// build it with lab.VM.BuildAndPut and run it in the lab guest against a
// listening rping -s, to reproduce the Linux iw_cm BUG() described in
// docs/linux-interop.md (problem 3).
//
//	mpaprobe -dial 10.0.2.15:7998 [-p2p=false] [-reset=false]
//
// It prints the reply it got and what it did, and exits non-zero if the
// connection did not get that far.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

func main() {
	dial := flag.String("dial", "", "the iWARP listener (host:port)")
	p2p := flag.Bool("p2p", true, "request peer-to-peer mode, with a zero-length RDMA Write as RTR")
	reset := flag.Bool("reset", true, "end with a TCP reset instead of a FIN")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("mpaprobe: ")
	if *dial == "" {
		log.Fatal("-dial is required")
	}
	c, err := net.DialTimeout("tcp", *dial, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := wire.MPAFrame{Enhanced: true, Revision: 2, IRD: 1, ORD: 1, P2P: *p2p}
	if *p2p {
		req.RTR = wire.RTRWrite
	}
	if _, err := c.Write(req.Append(nil)); err != nil {
		log.Fatalf("send the MPA Request: %v", err)
	}
	var h wire.MPAHeader
	if _, err := io.ReadFull(c, h[:]); err != nil {
		log.Fatalf("read the MPA Reply: %v", err)
	}
	if !h.IsReply() {
		log.Fatalf("not an MPA Reply: % x", h[:])
	}
	pd := make([]byte, h.PrivateDataLen())
	if _, err := io.ReadFull(c, pd); err != nil {
		log.Fatalf("read the MPA Reply's private data: %v", err)
	}
	rep, _, err := wire.ParseMPAFrame(append(h[:], pd...), wire.MPAMaxPrivateData)
	if err != nil {
		log.Fatalf("bad MPA Reply: %v", err)
	}
	fmt.Printf("MPA Reply: rev %d reject %v p2p %v rtr %v ird %d ord %d\n", rep.Revision, rep.Reject, rep.P2P, rep.RTR, rep.IRD, rep.ORD)
	if *reset {
		// SO_LINGER 0: close(2) sends a RST and drops the connection.
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	if *reset {
		fmt.Println("connection reset before the RTR")
	} else {
		fmt.Println("connection closed before the RTR")
	}
}
