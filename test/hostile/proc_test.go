package hostile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TCP states of /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpFinWait1    = 0x04
	tcpClose       = 0x07
	tcpCloseWait   = 0x08
	tcpLastAck     = 0x09
	tcpListen      = 0x0A
)

// tcpSock is one line of /proc/net/tcp: the kernel's view of a socket, which
// the suite reads to see what the daemon's side of a connection does
// without asking the daemon (how much it has queued to send, how much it
// left unread, whether it closed).
type tcpSock struct {
	localPort, remotePort int
	state                 int
	txQueue, rxQueue      int
	inode                 uint64
}

// tcpSockets reads /proc/net/tcp (IPv4 loopback is all the suite uses).
func tcpSockets() ([]tcpSock, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpSock
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		var s tcpSock
		port := func(a string) int {
			_, p, _ := strings.Cut(a, ":")
			n, _ := strconv.ParseUint(p, 16, 16)
			return int(n)
		}
		s.localPort, s.remotePort = port(fs[1]), port(fs[2])
		st, _ := strconv.ParseUint(fs[3], 16, 8)
		s.state = int(st)
		tx, rx, _ := strings.Cut(fs[4], ":")
		t, _ := strconv.ParseUint(tx, 16, 32)
		r, _ := strconv.ParseUint(rx, 16, 32)
		s.txQueue, s.rxQueue = int(t), int(r)
		s.inode, _ = strconv.ParseUint(fs[9], 10, 64)
		out = append(out, s)
	}
	return out, sc.Err()
}

// tcpPair returns the kernel's view of both ends of a loopback connection
// between the daemon's port and a client port: mine (the client's) and
// theirs (the daemon's). ok is false for an end that no longer exists.
func tcpPair(daemonPort, clientPort int) (mine, theirs tcpSock, mineOK, theirsOK bool) {
	socks, err := tcpSockets()
	if err != nil {
		return
	}
	for _, s := range socks {
		switch {
		case s.localPort == clientPort && s.remotePort == daemonPort:
			mine, mineOK = s, true
		case s.localPort == daemonPort && s.remotePort == clientPort:
			theirs, theirsOK = s, true
		}
	}
	return
}

// waitFor polls cond every 10 ms until it holds or the guard passes; it
// returns how long that took and whether it held.
func waitFor(limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listenerFD finds the daemon's file descriptor of its listening socket on
// port (the inode of the LISTEN socket in /proc/net/tcp, among the links
// in /proc/PID/fd).
func listenerFD(t testing.TB, pid, port int) int {
	t.Helper()
	socks, err := tcpSockets()
	if err != nil {
		t.Fatal(err)
	}
	var inode uint64
	for _, s := range socks {
		if s.localPort == port && s.state == tcpListen {
			inode = s.inode
		}
	}
	if inode == 0 {
		t.Fatalf("no listening socket on port %d", port)
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			fd, _ := strconv.Atoi(e.Name())
			return fd
		}
	}
	t.Fatalf("listening socket inode %d not among the fds of %d", inode, pid)
	return -1
}

// holdsSocket reports whether the daemon has a file descriptor of the socket
// with the given inode.
func (d *daemon) holdsSocket(inode uint64) bool {
	dir := fmt.Sprintf("/proc/%d/fd", d.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			return true
		}
	}
	return false
}

// waitSocketClosed waits until the daemon has closed its descriptor of
// the socket with the given inode (or died).
func (d *daemon) waitSocketClosed(inode uint64, limit time.Duration) (time.Duration, bool) {
	return waitFor(limit, func() bool { return !d.holdsSocket(inode) })
}

// errEOF is io.EOF (kept here so that case files need not import io for it).
var errEOF = io.EOF
