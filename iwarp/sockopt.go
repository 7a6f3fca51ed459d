package iwarp

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// TCPOptions are the TCP socket options a connection is given for long
// fat pipes (a WAN): the congestion control and the unsent-data low
// watermark. The socket buffers are Config.SocketSendBuffer and
// SocketReceiveBuffer. The zero value keeps the kernel's defaults
// (net.ipv4.tcp_congestion_control, no watermark), which docs/wan.md
// explains.
type TCPOptions struct {
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

// maxCongestionName is TCP_CA_NAME_MAX - 1 (include/net/tcp.h).
const maxCongestionName = 15

// Validate reports a setting out of range.
func (o TCPOptions) Validate() error {
	if len(o.Congestion) > maxCongestionName {
		return fmt.Errorf("iwarp: TCP congestion control %q: names have at most %d bytes", o.Congestion, maxCongestionName)
	}
	if o.NotSentLowat < 0 || o.NotSentLowat > maxSocketBuffer {
		return fmt.Errorf("iwarp: TCP_NOTSENT_LOWAT %d: want 0..%d", o.NotSentLowat, maxSocketBuffer)
	}
	return nil
}

// ErrTCPOption is wrapped by the error of a socket option the kernel
// refused (an unknown or unavailable congestion control).
var ErrTCPOption = errors.New("TCP socket option refused")

// Apply sets the options on conn (nothing for the zero value).
func (o TCPOptions) Apply(conn *net.TCPConn) error {
	if o == (TCPOptions{}) {
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

func (o TCPOptions) set(fd int) error {
	if o.Congestion != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion); err != nil {
			return fmt.Errorf("iwarp: %w: TCP_CONGESTION %q: %v (net.ipv4.tcp_available_congestion_control lists what the kernel has)", ErrTCPOption, o.Congestion, err)
		}
	}
	if o.NotSentLowat > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, o.NotSentLowat); err != nil {
			return fmt.Errorf("iwarp: %w: TCP_NOTSENT_LOWAT %d: %v", ErrTCPOption, o.NotSentLowat, err)
		}
	}
	return nil
}

// Probe checks that the kernel takes the options, on a socket of its own
// (for a configuration check at startup: a congestion control the kernel
// does not have is reported then, not at each connection).
func (o TCPOptions) Probe() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o == (TCPOptions{}) {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if err != nil {
			return fmt.Errorf("iwarp: probe socket: %w", err)
		}
	}
	defer unix.Close(fd)
	return o.set(fd)
}

// TCPCongestion reads the connection's congestion control (for tests and
// status).
func TCPCongestion(conn *net.TCPConn) (string, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return name, gerr
}
