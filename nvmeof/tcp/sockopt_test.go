package tcp

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/tcpopt"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// TestTCPOptions: Config.TCP reaches every accepted connection's socket,
// read back with getsockopt on the connection Accept hands over, and
// HostConfig.TCP the host queue's (Dial): the
// congestion control (one the kernel allows unprivileged sockets, other
// than its default where it has one, so that the change shows) and
// TCP_NOTSENT_LOWAT; a listener without options leaves the kernel's
// default congestion control and no watermark.
func TestTCPOptions(t *testing.T) {
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skipf("cannot read the kernel's default congestion control: %v", err)
	}
	kernelDefault := strings.TrimSpace(string(def))
	cc := kernelDefault
	if allowed, err := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control"); err == nil {
		for _, name := range strings.Fields(string(allowed)) {
			if name != kernelDefault {
				cc = name
				break
			}
		}
	}
	// The kernel's default watermark (net.ipv4.tcp_notsent_lowat, UINT_MAX
	// unless set: none), as getsockopt reports it (an int).
	lowat := -1
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_notsent_lowat"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
			lowat = int(int32(uint32(v)))
		}
	}
	t.Logf("congestion control %q (the kernel's default: %q; its TCP_NOTSENT_LOWAT %d)", cc, kernelDefault, lowat)
	if cc == kernelDefault {
		t.Logf("the kernel allows no congestion control but its default %q: the test sees TCP_NOTSENT_LOWAT change only", cc)
	}
	// matches: the options are those wanted; a socket without a watermark
	// reads 0 (a connecting socket) or the sysctl's value (an accepted
	// one, on the kernels seen), both the kernel's default.
	matches := func(o, want tcpopt.Options) bool {
		if want.NotSentLowat == lowat && o.NotSentLowat == 0 {
			o.NotSentLowat = lowat
		}
		return o == want
	}
	for _, tc := range []struct {
		name string
		opts tcpopt.Options
		want tcpopt.Options
	}{
		{"set", tcpopt.Options{Congestion: cc, NotSentLowat: 96 << 10}, tcpopt.Options{Congestion: cc, NotSentLowat: 96 << 10}},
		{"kernel defaults", tcpopt.Options{}, tcpopt.Options{Congestion: kernelDefault, NotSentLowat: lowat}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := Listen("tcp", "127.0.0.1:0", Config{TCP: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			type result struct {
				o   tcpopt.Options
				err error
			}
			got := make(chan result, 1)
			m := newMemHandler()
			go func() {
				r, err := ln.Accept(ctx)
				if err != nil {
					got <- result{err: err}
					return
				}
				o, err := tcpopt.Read(r.conn.(*net.TCPConn))
				got <- result{o, err}
				_, _ = r.Accept(m)
			}()
			h := dial(t, ln, wire.Digests{})
			h.Connect(0, 32, "", 0xffff, 0)
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !matches(r.o, tc.want) {
				t.Errorf("the accepted connection's options: %+v, want %+v", r.o, tc.want)
			}
			// The host side: Dial sets HostConfig.TCP on its connection.
			q, err := Dial(ctx, "tcp", ln.Addr().String(), HostConfig{TCP: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			o, err := tcpopt.Read(q.conn.(*net.TCPConn))
			if err != nil {
				t.Fatal(err)
			}
			if !matches(o, tc.want) {
				t.Errorf("the host queue's connection's options: %+v, want %+v", o, tc.want)
			}
		})
	}
	if _, err := Listen("tcp", "127.0.0.1:0", Config{TCP: tcpopt.Options{NotSentLowat: -1}}); err == nil {
		t.Error("a negative TCP_NOTSENT_LOWAT passed Listen")
	}
}
