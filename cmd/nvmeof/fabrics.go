package main

import (
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/connd"
)

// addFabricsFlags defines nvme-cli's fabrics flags on fs.
func addFabricsFlags(fs *pflag.FlagSet, o *connd.FabricsOptions, connect bool) {
	fs.StringVarP(&o.Transport, "transport", "t", "rdma", "transport type: rdma (NVMe/RDMA over iWARP) or tcp (NVMe/TCP)")
	fs.StringVarP(&o.Traddr, "traddr", "a", "", "transport address (IPv4 or IPv6 address, or host name)")
	fs.StringVarP(&o.Trsvcid, "trsvcid", "s", "", "transport service id (port; default 4420)")
	if connect {
		fs.StringVarP(&o.NQN, "nqn", "n", "", "subsystem NQN")
	}
	fs.StringVarP(&o.HostNQN, "hostnqn", "q", "", "user-defined host NQN (default /etc/nvme/hostnqn, else derived from the machine)")
	fs.StringVarP(&o.HostID, "hostid", "I", "", "user-defined host identifier (default /etc/nvme/hostid)")
	if connect {
		fs.IntVarP(&o.NrIOQueues, "nr-io-queues", "i", 0, "number of I/O queues to use (default number of CPUs)")
		fs.IntVarP(&o.QueueSize, "queue-size", "Q", 0, "number of entries per I/O queue (default 128)")
		fs.StringVarP(&o.DHCHAPSecret, "dhchap-secret", "S", "", "DH-HMAC-CHAP host secret (DHHC-1:..., or file:PATH of a file only its owner may read)")
		fs.StringVarP(&o.DHCHAPCtrlSecret, "dhchap-ctrl-secret", "C", "", "DH-HMAC-CHAP controller secret: authenticate the controller too (needs --dhchap-secret)")
	}
	fs.IntVarP(&o.KeepAliveTmo, "keep-alive-tmo", "k", 0, "keep alive timeout period in seconds (default 5; discovery 0)")
	fs.IntVarP(&o.ReconnectDelay, "reconnect-delay", "c", 0, "reconnect delay in seconds (default 10)")
	fs.IntVarP(&o.CtrlLossTmo, "ctrl-loss-tmo", "l", 600, "controller loss timeout period in seconds (-1: reconnect forever, 0: never)")
	fs.BoolVarP(&o.HdrDigest, "hdr-digest", "g", false, "NVMe/TCP: ask for the PDU header digest (CRC32C; ignored on rdma)")
	fs.BoolVarP(&o.DataDigest, "data-digest", "G", false, "NVMe/TCP: ask for the PDU data digest (CRC32C; ignored on rdma)")
	fs.StringVar(&o.CRC, "crc", "off", "MPA CRC policy: off, offered or required (nvmetd's iWARP engine)")
	fs.IntVar(&o.MaxFPDU, "max-fpdu", 0, "largest FPDU sent, in bytes (default: the TCP MSS, as siw)")
	fs.DurationVar(&o.ConnectTimeout, "connect-timeout", initiator.DefaultConnectTimeout, "bound on one attempt to open the association")
	fs.DurationVar(&o.IOTimeout, "io-timeout", 0, "I/O command timeout before error recovery (default 30s)")
	fs.DurationVar(&o.BusyPoll, "busy-poll", 0, "spin this long on each queue's socket before sleeping (lower latency for a busy core; 0: off; at most 1s)")
	fs.StringVar(&o.SocketBuffer, "socket-buffer", "", "SO_SNDBUF and SO_RCVBUF of each queue's socket (bytes, k/m; SPDK sets 2m; default: the kernel's, auto-tuned)")
	fs.StringVar(&o.TCPCongestion, "tcp-congestion", "", "congestion control of each queue's TCP connection (cubic, bbr where the kernel has it; default: the kernel's, net.ipv4.tcp_congestion_control)")
	fs.StringVar(&o.TCPNotSentLowat, "tcp-notsent-lowat", "", "TCP_NOTSENT_LOWAT of each queue's socket (bytes, k/m; default: none, the kernel's)")
	fs.IntVar(&o.MaxTransfer, "max-transfer", 0, "largest data transfer of one command in bytes (default 1 MiB, lowered by MDTS)")
	fs.BoolVarP(&o.Verbose, "verbose", "v", false, "log protocol events to stderr")
}

// newLogger logs to stderr when verbose, else nowhere.
func newLogger(verbose bool) *zap.Logger {
	if !verbose {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.OutputPaths = []string{"stderr"}
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}
