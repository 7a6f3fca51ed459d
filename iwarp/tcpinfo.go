package iwarp

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// TCPInfo is a sample of the kernel's TCP_INFO of a QP's connection
// (tcp(7)): what the transport under the LLP is doing.
type TCPInfo struct {
	RTT, RTTVar  time.Duration // smoothed round-trip time and its variation
	Retransmits  uint64        // segments retransmitted over the connection's life (tcpi_total_retrans)
	Cwnd         uint32        // congestion window, in segments
	Unacked      uint32        // segments sent and not yet acknowledged
	Lost         uint32        // segments presumed lost now
	SndMSS       uint32        // the sender's maximum segment size
	BytesAcked   uint64        // bytes the peer acknowledged
	BytesRecvd   uint64        // bytes received
	NotSentBytes uint32        // bytes queued in the socket and not yet sent
}

// errNoConn is TCPInfo's error for a QP without a connection.
var errNoConn = errors.New("iwarp: QP has no connection")

// TCPInfo samples TCP_INFO on the QP's socket (a system call; meant for
// metrics scrapes, not the data path). It fails once the QP has ended.
func (qp *QP) TCPInfo() (TCPInfo, error) {
	qp.mu.Lock()
	raw := qp.raw
	qp.mu.Unlock()
	if raw == nil {
		return TCPInfo{}, errNoConn
	}
	var ti *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ti, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return TCPInfo{}, err
	}
	if serr != nil {
		return TCPInfo{}, serr
	}
	return TCPInfo{
		RTT:          time.Duration(ti.Rtt) * time.Microsecond,
		RTTVar:       time.Duration(ti.Rttvar) * time.Microsecond,
		Retransmits:  uint64(ti.Total_retrans),
		Cwnd:         ti.Snd_cwnd,
		Unacked:      ti.Unacked,
		Lost:         ti.Lost,
		SndMSS:       ti.Snd_mss,
		BytesAcked:   ti.Bytes_acked,
		BytesRecvd:   ti.Bytes_received,
		NotSentBytes: ti.Notsent_bytes,
	}, nil
}
