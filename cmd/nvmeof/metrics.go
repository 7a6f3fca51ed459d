package main

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
	dHostLatency    = prometheus.NewDesc("nvmeof_host_queue_latency_seconds", "Command latency at the host, from the capsule's send to its completion, by op; 4 buckets per octave from 100 ns.", append(hqLabels, "op"), nil)
)

// hostCollector collects a controller's metrics.
type hostCollector struct {
	ctrl           *initiator.Controller
	subnqn, traddr string
}

// Describe sends the descriptors (prometheus.Collector).
func (h *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dHostState, dHostReconnects, dHostCommands, dHostErrors, dHostBytes, dHostInflight, dHostLatency} {
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
			b, n := l.s.Cumulative(1)
			ch <- prometheus.MustNewConstHistogram(dHostLatency, n, float64(l.s.Sum)/1e9, b, lv(l.op)...)
		}
	}
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
