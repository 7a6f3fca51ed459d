// Package tcpopt holds the TCP socket options of the daemon's connections
// that both transports share (the iWARP engine's, iwarp.TCPOptions, and
// NVMe/TCP's, nvmeof/tcp Config.TCP): the congestion control and the
// unsent-data low watermark (issue 26, docs/wan.md). One definition, one
// way to set and check them, whichever transport's listener accepted the
// connection.
package tcpopt

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Options are the TCP socket options a connection is given for long fat
// pipes (a WAN): the congestion control and the unsent-data low
// watermark. The zero value keeps the kernel's defaults
// (net.ipv4.tcp_congestion_control, no watermark), which docs/wan.md
// explains.
type Options struct {
	// Congestion is the connection's congestion control algorithm
	// (TCP_CONGESTION): "cubic", "bbr", "reno", ... one the kernel has
	// (net.ipv4.tcp_available_congestion_control; a privileged process
	// also gets one that is only allowed, or whose module loads). Empty:
	// the kernel's default.
	Congestion string
	// NotSentLowat is TCP_NOTSENT_LOWAT in bytes: the socket reports
	// itself writable only while less than this is queued but not yet
	// sent, so data waits in the sender's queues (the ULP's, where it can
	// still be reordered or cut) rather than behind a long send buffer.
	// 0: no watermark (the kernel's default, net.ipv4.tcp_notsent_lowat).
	NotSentLowat int
}

// MaxCongestionName is TCP_CA_NAME_MAX - 1 (include/net/tcp.h).
const MaxCongestionName = 15

// MaxNotSentLowat is the largest NotSentLowat taken (1 GiB, the socket
// buffers' bound).
const MaxNotSentLowat = 1 << 30

// Validate reports a setting out of range.
func (o Options) Validate() error {
	if len(o.Congestion) > MaxCongestionName {
		return fmt.Errorf("tcp: congestion control %q: names have at most %d bytes", o.Congestion, MaxCongestionName)
	}
	if o.NotSentLowat < 0 || o.NotSentLowat > MaxNotSentLowat {
		return fmt.Errorf("tcp: TCP_NOTSENT_LOWAT %d: want 0..%d", o.NotSentLowat, MaxNotSentLowat)
	}
	return nil
}

// ErrRefused is wrapped by the error of a socket option the kernel
// refused (an unknown or unavailable congestion control).
var ErrRefused = errors.New("TCP socket option refused")

// Apply sets the options on conn (nothing for the zero value).
func (o Options) Apply(conn *net.TCPConn) error {
	if o == (Options{}) {
		return nil
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = o.set(int(fd)) }); err != nil {
		return err
	}
	return serr
}

func (o Options) set(fd int) error {
	if o.Congestion != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion); err != nil {
			return fmt.Errorf("tcp: %w: TCP_CONGESTION %q: %v (net.ipv4.tcp_available_congestion_control lists what the kernel has)", ErrRefused, o.Congestion, err)
		}
	}
	if o.NotSentLowat > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, o.NotSentLowat); err != nil {
			return fmt.Errorf("tcp: %w: TCP_NOTSENT_LOWAT %d: %v", ErrRefused, o.NotSentLowat, err)
		}
	}
	return nil
}

// Probe checks that the kernel takes the options, on a socket of its own
// (for a configuration check at startup: a congestion control the kernel
// does not have is reported then, not at each connection).
func (o Options) Probe() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o == (Options{}) {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if err != nil {
			return fmt.Errorf("tcp: probe socket: %w", err)
		}
	}
	defer unix.Close(fd)
	return o.set(fd)
}

// Read returns the options conn has now (getsockopt: TCP_CONGESTION and
// TCP_NOTSENT_LOWAT), for tests and status.
func Read(conn *net.TCPConn) (Options, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return Options{}, err
	}
	var o Options
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		if o.Congestion, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); gerr != nil {
			gerr = fmt.Errorf("tcp: TCP_CONGESTION: %w", gerr)
			return
		}
		if o.NotSentLowat, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT); gerr != nil {
			gerr = fmt.Errorf("tcp: TCP_NOTSENT_LOWAT: %w", gerr)
		}
	}); err != nil {
		return Options{}, err
	}
	return o, gerr
}
