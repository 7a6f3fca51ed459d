package iwarp

import (
	"net"

	"github.com/nvmetd/nvmetd/internal/tcpopt"
)

// TCPOptions are the TCP socket options a connection is given for long
// fat pipes (a WAN): the congestion control and the unsent-data low
// watermark; the socket buffers are Config.SocketSendBuffer and
// SocketReceiveBuffer. The type is internal/tcpopt's, which NVMe/TCP's
// ports use too (nvmeof/tcp Config.TCP): one definition for both
// transports. The zero value keeps the kernel's defaults, which
// docs/wan.md explains.
type TCPOptions = tcpopt.Options

// ErrTCPOption is wrapped by the error of a socket option the kernel
// refused (an unknown or unavailable congestion control).
var ErrTCPOption = tcpopt.ErrRefused

// TCPCongestion reads the connection's congestion control (for tests and
// status).
func TCPCongestion(conn *net.TCPConn) (string, error) {
	o, err := tcpopt.Read(conn)
	return o.Congestion, err
}
