package iwarp

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTCPOptions: Config.TCP reaches both ends' sockets: the congestion
// control (one the kernel allows to unprivileged sockets, from
// net.ipv4.tcp_allowed_congestion_control, other than its default, so
// that the test sees a change) and TCP_NOTSENT_LOWAT.
func TestTCPOptions(t *testing.T) {
	allowed, err := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
	if err != nil {
		t.Skipf("cannot read the kernel's congestion controls: %v", err)
	}
	def, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	var cc string
	for _, name := range strings.Fields(string(allowed)) {
		if name != strings.TrimSpace(string(def)) {
			cc = name
			break
		}
	}
	if cc == "" {
		t.Skipf("the kernel allows no congestion control but its default %q (tcp_allowed_congestion_control %q)", def, allowed)
	}
	cfg := &Config{TCP: TCPOptions{Congestion: cc, NotSentLowat: 128 << 10}}
	cli, srv := pair(t, pairOpts{clientCfg: cfg, serverCfg: cfg})
	for _, s := range []*side{cli, srv} {
		var name string
		var lowat int
		var gerr error
		if err := s.qp.raw.Control(func(fd uintptr) {
			if name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); gerr != nil {
				return
			}
			lowat, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
		}); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		if name != cc || lowat != 128<<10 {
			t.Errorf("TCP_CONGESTION %q, TCP_NOTSENT_LOWAT %d; want %q and %d", name, lowat, cc, 128<<10)
		}
	}
}

// TestTCPOptionsRefused: a congestion control the kernel does not have is
// reported by Probe (the configuration check) with ErrTCPOption, and a
// name longer than the kernel's limit by Validate.
func TestTCPOptionsRefused(t *testing.T) {
	err := TCPOptions{Congestion: "no-such-cc"}.Probe()
	if !errors.Is(err, ErrTCPOption) || !strings.Contains(err.Error(), "no-such-cc") {
		t.Errorf("Probe of an unknown congestion control: %v", err)
	}
	if err := (TCPOptions{Congestion: strings.Repeat("x", 16)}).Validate(); err == nil {
		t.Error("a 16-byte congestion control name passed Validate")
	}
	if err := (&Config{TCP: TCPOptions{NotSentLowat: -1}}).Validate(); err == nil {
		t.Error("a negative TCP_NOTSENT_LOWAT passed Config.Validate")
	}
	if err := (TCPOptions{}).Probe(); err != nil {
		t.Errorf("Probe of the zero value: %v", err)
	}
}
