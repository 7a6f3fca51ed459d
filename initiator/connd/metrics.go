package connd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/lathist"
	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/internal/version"
)

// The host daemon's metrics (nvmeof connect --metrics-listen): per I/O
// queue of the controller, from the initiator's plain counters, summed on
// scrape.
var (
	hostLabels = []string{"subnqn", "traddr"}
	hqLabels   = []string{"subnqn", "traddr", "qid"}

	dHostState      = prometheus.NewDesc("nvmeof_host_controller_state", "The controller's state (1 for the current one: new, live, resetting, connecting, deleting, dead).", append(hostLabels, "state"), nil)
	dHostReconnects = prometheus.NewDesc("nvmeof_host_reconnects_total", "Associations re-established after a failure.", hostLabels, nil)
	dHostCommands   = prometheus.NewDesc("nvmeof_host_queue_commands_total", "Commands completed on the I/O queue, by op (read, write, other).", append(hqLabels, "op"), nil)
	dHostErrors     = prometheus.NewDesc("nvmeof_host_queue_errors_total", "Commands of the I/O queue completed with an error status.", hqLabels, nil)
	dHostBytes      = prometheus.NewDesc("nvmeof_host_queue_bytes_total", "Data bytes of the I/O queue's successful reads and writes.", append(hqLabels, "direction"), nil)
	dHostInflight   = prometheus.NewDesc("nvmeof_host_queue_inflight_commands", "Commands of the I/O queue on the wire now.", hqLabels, nil)
	dHostQPState    = prometheus.NewDesc("nvmeof_host_qp_state", "The state of the queue's iWARP QP (1 for the current one).", append(hqLabels, "state"), nil)
	dHostFPDUs      = prometheus.NewDesc("nvmeof_host_qp_fpdus_total", "FPDUs sent and received on the queue's current connection.", append(hqLabels, "direction"), nil)
	dHostCRC        = prometheus.NewDesc("nvmeof_host_mpa_crc_errors_total", "FPDUs received with a bad MPA CRC on the queue's current connection.", hqLabels, nil)
	dHostTerms      = prometheus.NewDesc("nvmeof_host_iwarp_terminates_total", "Terminates sent and received on the queue's current connection, by layer, error type and code (RFC 5040 §7.1).", append(hqLabels, "direction", "layer", "type", "code"), nil)
	dHostRTT        = prometheus.NewDesc("nvmeof_host_qp_tcp_rtt_seconds", "Smoothed TCP round-trip time of the queue's connection (TCP_INFO, sampled on scrape).", hqLabels, nil)
	dHostRetrans    = prometheus.NewDesc("nvmeof_host_qp_tcp_retransmits_total", "TCP segments retransmitted on the queue's current connection.", hqLabels, nil)
	dHostCwnd       = prometheus.NewDesc("nvmeof_host_qp_tcp_cwnd_segments", "TCP congestion window of the queue's connection.", hqLabels, nil)
	dHostUnacked    = prometheus.NewDesc("nvmeof_host_qp_tcp_unacked_segments", "TCP segments sent and not yet acknowledged on the queue's connection.", hqLabels, nil)
	dHostLatency    = prometheus.NewDesc("nvmeof_host_queue_latency_seconds", "Command latency at the host, from the capsule's send to its completion, by op; one bucket per octave from 1.35 µs to 22.6 s.", append(hqLabels, "op"), nil)
)

// hostCollector collects a controller's metrics.
type hostCollector struct {
	ctrl           *initiator.Controller
	subnqn, traddr string
}

// Describe sends the descriptors (prometheus.Collector).
func (h *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dHostState, dHostReconnects, dHostCommands, dHostErrors, dHostBytes, dHostInflight, dHostLatency,
		dHostQPState, dHostFPDUs, dHostCRC, dHostTerms, dHostRTT, dHostRetrans, dHostCwnd, dHostUnacked} {
		ch <- d
	}
}

// Collect reads the controller's counters (prometheus.Collector).
func (h *hostCollector) Collect(ch chan<- prometheus.Metric) {
	cur := h.ctrl.State()
	for s := initiator.StateNew; s <= initiator.StateDead; s++ {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(dHostState, prometheus.GaugeValue, v, h.subnqn, h.traddr, s.String())
	}
	ch <- prometheus.MustNewConstMetric(dHostReconnects, prometheus.CounterValue, float64(h.ctrl.Reconnects()), h.subnqn, h.traddr)
	for _, q := range h.ctrl.IOStats() {
		qid := strconv.Itoa(int(q.QID))
		lv := func(extra ...string) []string { return append([]string{h.subnqn, h.traddr, qid}, extra...) }
		ch <- prometheus.MustNewConstMetric(dHostCommands, prometheus.CounterValue, float64(q.Reads), lv("read")...)
		ch <- prometheus.MustNewConstMetric(dHostCommands, prometheus.CounterValue, float64(q.Writes), lv("write")...)
		ch <- prometheus.MustNewConstMetric(dHostCommands, prometheus.CounterValue, float64(q.Others), lv("other")...)
		ch <- prometheus.MustNewConstMetric(dHostErrors, prometheus.CounterValue, float64(q.Errors), lv()...)
		ch <- prometheus.MustNewConstMetric(dHostBytes, prometheus.CounterValue, float64(q.ReadBytes), lv("read")...)
		ch <- prometheus.MustNewConstMetric(dHostBytes, prometheus.CounterValue, float64(q.WriteBytes), lv("write")...)
		ch <- prometheus.MustNewConstMetric(dHostInflight, prometheus.GaugeValue, float64(q.InFlight), lv()...)
		for _, l := range []struct {
			op string
			s  *lathist.Snap
		}{{"read", &q.ReadLatency}, {"write", &q.WriteLatency}, {"other", &q.OtherLatency}} {
			b, n := l.s.Export() // the target's layout: one bucket per octave

			ch <- prometheus.MustNewConstHistogram(dHostLatency, n, float64(l.s.Sum)/1e9, b, lv(l.op)...)
		}
	}
	for _, q := range h.ctrl.TransportStats() {
		qid := strconv.Itoa(int(q.QID))
		lv := func(extra ...string) []string { return append([]string{h.subnqn, h.traddr, qid}, extra...) }
		for _, s := range []string{"idle", "rts", "closing", "terminate", "error"} {
			v := 0.0
			if s == q.QP.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(dHostQPState, prometheus.GaugeValue, v, lv(s)...)
		}
		ch <- prometheus.MustNewConstMetric(dHostFPDUs, prometheus.CounterValue, float64(q.QP.FPDUsSent), lv("sent")...)
		ch <- prometheus.MustNewConstMetric(dHostFPDUs, prometheus.CounterValue, float64(q.QP.FPDUsReceived), lv("received")...)
		ch <- prometheus.MustNewConstMetric(dHostCRC, prometheus.CounterValue, float64(q.QP.CRCErrors), lv()...)
		for _, t := range []struct {
			dir   string
			on    bool
			cause uint16
		}{{"sent", q.QP.TerminateSent, q.QP.TerminateSentCause}, {"received", q.QP.TerminateReceived, q.QP.TerminateReceivedCause}} {
			if t.on {
				ch <- prometheus.MustNewConstMetric(dHostTerms, prometheus.CounterValue, 1, lv(t.dir, termLayer(uint8(t.cause>>12)),
					strconv.Itoa(int(t.cause>>8)&0xF), fmt.Sprintf("0x%02x", uint8(t.cause)))...)
			}
		}
		if q.TCPOK {
			ch <- prometheus.MustNewConstMetric(dHostRTT, prometheus.GaugeValue, q.TCP.RTT.Seconds(), lv()...)
			ch <- prometheus.MustNewConstMetric(dHostRetrans, prometheus.CounterValue, float64(q.TCP.Retransmits), lv()...)
			ch <- prometheus.MustNewConstMetric(dHostCwnd, prometheus.GaugeValue, float64(q.TCP.Cwnd), lv()...)
			ch <- prometheus.MustNewConstMetric(dHostUnacked, prometheus.GaugeValue, float64(q.TCP.Unacked), lv()...)
		}
	}
}

// termLayer names the layer of a Terminate's cause (RFC 5040 §7.1).
func termLayer(l uint8) string {
	switch l {
	case 0:
		return "rdmap"
	case 1:
		return "ddp"
	case 2:
		return "mpa"
	}
	return strconv.Itoa(int(l))
}

// startHostMetrics serves the controller's metrics on listen: "IP:port",
// or "unix:/path" for a unix socket.
func (d *daemon) startHostMetrics(listen string) (*metricserve.Server, error) {
	reg, err := metricserve.NewRegistry("nvmeof", version.Version(), &hostCollector{ctrl: d.ctrl, subnqn: d.cfg.SubNQN, traddr: d.cfg.Address})
	if err != nil {
		return nil, err
	}
	cfg := metricserve.Config{Address: listen}
	if p, ok := strings.CutPrefix(listen, "unix:"); ok {
		cfg = metricserve.Config{Socket: p}
	}
	s, err := metricserve.Start(cfg, reg, d.log.Named("metrics"))
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", listen, err)
	}
	return s, nil
}
