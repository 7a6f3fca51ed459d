package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/iwarp"
)

func TestFillPing(t *testing.T) {
	b := make([]byte, 64)
	fillPing(b, 0, 65)
	want := "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	if got := string(cstring(b)); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// The letter run wraps from 'z' back to 'A'.
	big := make([]byte, 100)
	fillPing(big, 12, 120)
	if !strings.HasPrefix(string(big[14:]), "xyzABC") {
		t.Fatalf("wrap: %q", big[14:20])
	}
}

// TestIwpingSelf runs iwping's client against its server over loopback, for
// sizes from rping's minimum to 1 MiB, with CRC off and on.
func TestIwpingSelf(t *testing.T) {
	for _, crc := range []iwarp.CRCPolicy{iwarp.CRCOff, iwarp.CRCRequired} {
		for _, size := range []int{rpingMinSize, 64, 100, 4096, rpingMaxSize, 1 << 20} {
			t.Run(fmt.Sprintf("crc=%v/size=%d", crc, size), func(t *testing.T) {
				o := options{port: 0, addr: "127.0.0.1", size: size, count: 5, verbose: true, validate: true, log: zap.NewNop()}
				o.cfg.CRC = crc
				out := runPair(t, o)
				if n := strings.Count(out.client, "ping data: rdma-ping-"); n != 5 {
					t.Fatalf("client printed %d pings:\n%s", n, out.client)
				}
				if n := strings.Count(out.server, "server ping data: rdma-ping-"); n != 5 {
					t.Fatalf("server printed %d pings", n)
				}
			})
		}
	}
}

func TestIwpingP2PAndRev1(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  iwarp.Config
	}{
		{"p2p", iwarp.Config{PeerToPeer: true}},
		{"mpa-rev1", iwarp.Config{MPARevision: 1}},
		{"small-fpdu", iwarp.Config{MaxFPDU: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{addr: "127.0.0.1", size: 1000, count: 3, validate: true, cfg: tc.cfg, log: zap.NewNop()}
			runPair(t, o)
		})
	}
}

type outputs struct{ client, server string }

type syncBuf = testnode.SyncBuffer

func runPair(t *testing.T, o options) outputs {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var srvOut, cliOut syncBuf
	addrCh := make(chan net.Addr, 1)
	srvErr := make(chan error, 1)
	so := o
	so.server = true
	go func() { srvErr <- runServer(ctx, &so, &srvOut, func(a net.Addr) { addrCh <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrCh:
	case err := <-srvErr:
		t.Fatal(err)
	}
	co := o
	co.port = addr.(*net.TCPAddr).Port
	if err := runClient(ctx, &co, &cliOut); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	return outputs{cliOut.String(), srvOut.String()}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{}, 22},
		{[]string{"-s", "-c"}, 22},
		{[]string{"-c"}, 22},
		{[]string{"-c", "-a", "127.0.0.1", "-S", "10"}, 22},
		{[]string{"-c", "-a", "127.0.0.1", "-C", "-1"}, 22},
		{[]string{"-s", "--crc", "maybe"}, 22},
		{[]string{"-s", "--mpa-rev", "3"}, 22},
		{[]string{"--help"}, 0},
	} {
		if code := run(tc.args); code != tc.code {
			t.Errorf("iwping %v: exit %d, want %d", tc.args, code, tc.code)
		}
	}
}
