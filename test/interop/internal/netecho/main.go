// Command netecho is a small TCP echo server and client that the interop
// tests build with lab.VM.BuildAndPut and run inside the lab guest, to prove
// that static Go binaries run there and that the host and guest reach each
// other.
//
//	netecho -listen :7000 [-n 1]        echo every connection back until EOF; exit after n
//	netecho -dial 10.0.2.2:PORT -bytes N send N random bytes, half-close, check the echo
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to serve the echo on")
	n := flag.Int("n", 0, "with -listen: exit after this many connections (0: never)")
	dial := flag.String("dial", "", "echo server to test")
	size := flag.Int("bytes", 1<<20, "with -dial: bytes to send")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("netecho: ")
	switch {
	case *listen != "":
		serve(*listen, *n)
	case *dial != "":
		check(*dial, *size)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func serve(addr string, n int) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	for i := 0; n == 0 || i < n; i++ {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		nb, err := io.Copy(c, c)
		c.Close()
		if err != nil {
			log.Fatalf("echo to %s: %v", c.RemoteAddr(), err)
		}
		fmt.Printf("echoed %d bytes to %s\n", nb, c.RemoteAddr())
	}
}

func check(addr string, size int) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		log.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		log.Fatalf("read from %s: %v", addr, err)
	}
	if err := <-werr; err != nil {
		log.Fatalf("write to %s: %v", addr, err)
	}
	if !bytes.Equal(got, data) {
		log.Fatalf("echo from %s differs: sent %d bytes, got %d", addr, len(data), len(got))
	}
	fmt.Printf("ok %d bytes sha256=%x\n", len(data), sha256.Sum256(data))
}
