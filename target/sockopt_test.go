package target_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/target"
)

// TestTCPPortSocketOptions: the socket options of transport
// (tcp_congestion, tcp_notsent_lowat) and a port's tcp_congestion over
// them apply to NVMe/TCP ports as to iWARP ones (issue 26, docs/wan.md):
// read back with getsockopt on the target's accepted socket (found among
// this process's descriptors by its endpoints) of a connection to each
// port.
func TestTCPPortSocketOptions(t *testing.T) {
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skipf("cannot read the kernel's default congestion control: %v", err)
	}
	kernelDefault := strings.TrimSpace(string(def))
	cc := ""
	if allowed, err := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control"); err == nil {
		for _, name := range strings.Fields(string(allowed)) {
			if name != kernelDefault {
				cc = name
				break
			}
		}
	}
	if cc == "" {
		t.Skipf("the kernel allows unprivileged sockets no congestion control but its default %q: a port's override would not show", kernelDefault)
	}
	p1, p2 := testnode.FreePort(t), testnode.FreePort(t)
	cfg := &target.Config{
		Transport: target.TransportConfig{TCPNotSentLowat: "96KiB"},
		Ports: []target.PortConfig{
			{ID: 1, Address: "127.0.0.1", ServiceID: p1, Transport: target.TransportTCP, TCPCongestion: cc},
			{ID: 2, Address: "127.0.0.1", ServiceID: p2, Transport: target.TransportTCP},
		},
	}
	tgt, err := target.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = tgt.Shutdown(ctx)
	}()
	for _, c := range []struct {
		port       int
		congestion string
	}{{p1, cc}, {p2, kernelDefault}} {
		conn, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(c.port))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		peer := conn.LocalAddr().(*net.TCPAddr).Port
		// The accept and the options are the listener's goroutines': poll.
		var name string
		var lowat int
		deadline := time.Now().Add(time.Minute)
		for {
			if fd, ok := acceptedSocket(t, c.port, peer); ok {
				name, _ = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
				lowat, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
				if name == c.congestion && lowat == 96<<10 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %d: the accepted socket has TCP_CONGESTION %q, TCP_NOTSENT_LOWAT %d; want %q and %d", c.port, name, lowat, c.congestion, 96<<10)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("port %d: TCP_CONGESTION %q, TCP_NOTSENT_LOWAT %d", c.port, name, lowat)
	}
}

// acceptedSocket returns the descriptor of this process whose socket's
// local port is port and peer's port is peer (the target's end of a
// connection to 127.0.0.1:port).
func acceptedSocket(t *testing.T, port, peer int) (int, bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list this process's descriptors: %v", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		la, err1 := unix.Getsockname(fd)
		pa, err2 := unix.Getpeername(fd)
		l4, ok1 := la.(*unix.SockaddrInet4)
		p4, ok2 := pa.(*unix.SockaddrInet4)
		if err1 == nil && err2 == nil && ok1 && ok2 && l4.Port == port && p4.Port == peer {
			return fd, true
		}
	}
	return 0, false
}
