package target

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// DefaultMetricsMaxControllers is the default cap on the controllers that
// get their own series (MetricsConfig.MaxControllers).
const DefaultMetricsMaxControllers = 256

// metricsNamespace prefixes every metric name of the target.
const metricsNamespace = "nvmetd"

// desc builds a descriptor of the target's metrics.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricsNamespace+"_"+name, help, labels, nil)
}

var (
	subLabels   = []string{"subsystem"}
	ctrlLabels  = []string{"subsystem", "cntlid", "host"}
	queueLabels = []string{"subsystem", "cntlid", "qid"}
	nsLabels    = []string{"subsystem", "nsid"}

	dSubCommands = desc("subsystem_commands_total", "Commands completed on the subsystem's controllers, by opcode class and status (success or the error's status code type).", "subsystem", "opcode", "status")
	dSubBytes    = desc("subsystem_bytes_total", "Data bytes of successful reads (direction read) and writes (write) on the subsystem.", "subsystem", "direction")
	dSubLatency  = desc("subsystem_command_latency_seconds", "Command latency at the target, from the capsule's arrival to the response being posted, by op (read, write, other); 4 buckets per octave from 100 ns.", "subsystem", "op")
	dSubInflight = desc("subsystem_inflight_commands", "Commands of the subsystem in execution now.", subLabels...)
	dSubCtrls    = desc("subsystem_controllers", "Controllers of the subsystem now.", subLabels...)

	dCtrlInfo       = desc("controller_info", "A controller (1), with the port its admin queue came through.", "subsystem", "cntlid", "host", "port")
	dCtrlCommands   = desc("controller_commands_total", "Commands completed on the controller, by opcode class and status.", "subsystem", "cntlid", "host", "opcode", "status")
	dCtrlBytes      = desc("controller_bytes_total", "Data bytes of the controller's successful reads and writes.", "subsystem", "cntlid", "host", "direction")
	dCtrlLatency    = desc("controller_command_latency_seconds", "Command latency of the controller, by op; 2 buckets per octave from 100 ns.", "subsystem", "cntlid", "host", "op")
	dCtrlInflight   = desc("controller_inflight_commands", "Commands of the controller in execution now.", ctrlLabels...)
	dCtrlQueues     = desc("controller_io_queues", "I/O queues of the controller now.", ctrlLabels...)
	dCtrlUnlabelled = desc("metrics_controllers_unlabelled", "Controllers beyond metrics.max_controllers: counted in their subsystem's series only.")

	dQueueCommands = desc("queue_commands_total", "Commands completed on the queue, by opcode class and status.", "subsystem", "cntlid", "qid", "opcode", "status")
	dQueueBytes    = desc("queue_bytes_total", "Data bytes of the queue's successful reads and writes.", "subsystem", "cntlid", "qid", "direction")
	dQueueInflight = desc("queue_inflight_commands", "Commands of the queue in execution now (held AERs excluded).", queueLabels...)
	dQueueSize     = desc("queue_size", "Entries of the queue (HSQSIZE+1).", queueLabels...)
	dQueueBacklog  = desc("queue_backlog_commands", "Commands waiting for a request context and send queue room now.", queueLabels...)
	dQueueWaiting  = desc("queue_buffer_waiting_commands", "Commands waiting for a registered data buffer now.", queueLabels...)

	dQPState      = desc("qp_state", "The state of the queue's iWARP QP (1 for the current state).", "subsystem", "cntlid", "qid", "state")
	dQPFPDUs      = desc("qp_fpdus_total", "FPDUs sent and received on the queue's QP.", "subsystem", "cntlid", "qid", "direction")
	dQPRTT        = desc("qp_tcp_rtt_seconds", "Smoothed TCP round-trip time of the queue's connection (TCP_INFO, sampled on scrape).", queueLabels...)
	dQPRetrans    = desc("qp_tcp_retransmits_total", "TCP segments retransmitted on the queue's connection (TCP_INFO tcpi_total_retrans).", queueLabels...)
	dQPCwnd       = desc("qp_tcp_cwnd_segments", "TCP congestion window of the queue's connection (TCP_INFO).", queueLabels...)
	dQPUnacked    = desc("qp_tcp_unacked_segments", "TCP segments sent and not yet acknowledged on the queue's connection (TCP_INFO).", queueLabels...)
	dQPNotSent    = desc("qp_tcp_notsent_bytes", "Bytes queued in the queue's socket and not yet sent (TCP_INFO).", queueLabels...)
	dPortFPDUs    = desc("port_fpdus_total", "FPDUs sent and received on the port's connections, closed ones included.", "port", "direction")
	dPortCRC      = desc("mpa_crc_errors_total", "FPDUs received with a bad MPA CRC on the port's connections.", "port")
	dTerminates   = desc("iwarp_terminates_total", "iWARP Terminate messages sent and received (RFC 5040 §5.3), by layer, error type and error code of the cause.", "port", "direction", "layer", "type", "code")
	dTCPPDUs      = desc("port_tcp_pdus_total", "NVMe/TCP PDUs sent and received on the port's connections, closed ones included.", "port", "direction")
	dTCPDigest    = desc("tcp_digest_errors_total", "NVMe/TCP PDUs received with a wrong header digest (fatal to the queue) or data digest (the command fails) on the port's connections.", "port", "digest")
	dTCPTermReqs  = desc("tcp_termreqs_total", "NVMe/TCP connections ended by a C2HTermReq sent or an H2CTermReq received (TCP 1.0 §3.6.2.9), by fatal error status.", "port", "direction", "fes")
	dPortListen   = desc("port_listening", "Whether the port is listening (1) or not (0).", "port", "address")
	dPortQueues   = desc("port_queues", "Queues (connections past the RDMA CM exchange or the NVMe/TCP ICReq) on the port now.", "port")
	dConnections  = desc("connections", "Connections held by the target now, by state (pending: not yet past a successful Connect).", "state")
	dAdmission    = desc("connections_admission_total", "Connections accepted, admitted, and closed by the admission limits (refused at once, evicted, timed out).", "outcome")
	dRefused      = desc("connections_refused_total", "Queues and Connects refused, by reason.", "reason")
	dKAExpired    = desc("keepalive_expiries_total", "Controllers torn down because their keep-alive timeout expired.", subLabels...)
	dCtrlCreated  = desc("controllers_created_total", "Controllers created (successful admin Connects).", subLabels...)
	dCtrlEnded    = desc("controllers_ended_total", "Controllers ended, by reason.", "subsystem", "reason")
	dReconnects   = desc("controller_reconnects_total", "Controllers created for a host whose previous controller on the subsystem ended without a shutdown notification (CC.SHN): lost connection, keep-alive timeout, Terminate.", subLabels...)
	dAuthFailures = desc("auth_failures_total", "Failed in-band authentications of hosts.", subLabels...)

	dNSState       = desc("namespace_state", "The namespace's state (1 for the current one: online, disabled, failed).", "subsystem", "nsid", "state")
	dNSSize        = desc("namespace_size_bytes", "Size of the namespace.", nsLabels...)
	dNSCommands    = desc("namespace_commands_total", "Backend commands run on the namespace, by op (read, write, other).", "subsystem", "nsid", "op")
	dNSBytes       = desc("namespace_bytes_total", "Data bytes read from and written to the namespace's backend.", "subsystem", "nsid", "direction")
	dNSErrors      = desc("backend_errors_total", "Backend calls of the namespace that failed.", nsLabels...)
	dNSMediaErrors = desc("backend_media_errors_total", "Backend calls of the namespace that failed with a media (I/O) error.", nsLabels...)
	dNSLatency     = desc("backend_latency_seconds", "Time spent in the namespace's backend per command, by op; 4 buckets per octave from 100 ns.", "subsystem", "nsid", "op")
	dNSNowait      = desc("backend_nowait_total", "Reads and writes tried without waiting on the queue's goroutine (RWF_NOWAIT: the page cache had the data) by result: done, or missed (handed to a backend worker).", "subsystem", "nsid", "result")
	dNSSlowPaths   = desc("backend_slow_path_total", "Backend calls that took a slow path: bounce_read and bounce_write (copied through an aligned buffer for O_DIRECT), zero_fallback (Write Zeroes written as zeroes).", "subsystem", "nsid", "path")
	dNSAllocated   = desc("backend_allocated_bytes", "Memory held by a memory backend.", nsLabels...)

	allDescs = []*prometheus.Desc{
		dSubCommands, dSubBytes, dSubLatency, dSubInflight, dSubCtrls,
		dCtrlInfo, dCtrlCommands, dCtrlBytes, dCtrlLatency, dCtrlInflight, dCtrlQueues, dCtrlUnlabelled,
		dQueueCommands, dQueueBytes, dQueueInflight, dQueueSize, dQueueBacklog, dQueueWaiting,
		dQPState, dQPFPDUs, dQPRTT, dQPRetrans, dQPCwnd, dQPUnacked, dQPNotSent,
		dPortFPDUs, dPortCRC, dTerminates, dTCPPDUs, dTCPDigest, dTCPTermReqs, dPortListen, dPortQueues, dConnections, dAdmission, dRefused,
		dKAExpired, dCtrlCreated, dCtrlEnded, dReconnects, dAuthFailures,
		dNSState, dNSSize, dNSCommands, dNSBytes, dNSErrors, dNSMediaErrors, dNSLatency,
		dNSNowait, dNSSlowPaths, dNSAllocated,
	}
)

// MetricsCollector returns a Prometheus collector of the target's metrics:
// per subsystem, controller, queue (and its QP), port and namespace. The
// data path keeps plain per-queue atomics; the collector sums them on each
// scrape (and samples TCP_INFO on every queue's socket). Controllers beyond
// maxControllers (0: DefaultMetricsMaxControllers), in subsystem and
// CNTLID order, get no series of their own (nor do their queues).
// Commands are timed for the latency histograms from the first call on
// (until then the data path reads no clock).
func (t *Target) MetricsCollector(maxControllers int) prometheus.Collector {
	if maxControllers <= 0 {
		maxControllers = DefaultMetricsMaxControllers
	}
	t.s.timed.Store(true)
	return &collector{s: t.s, maxCtrls: maxControllers}
}

type collector struct {
	s        *server
	maxCtrls int
}

// Describe sends the descriptors of every metric (prometheus.Collector).
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// queueView is what the collector read of a live queue.
type queueView struct {
	q     *queue
	ctrl  *controller
	conn  *rdma.ControllerQueue
	tconn *tcp.ControllerQueue
}

// Collect reads the target's counters (prometheus.Collector).
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}

	s.regMu.RLock()
	var subs []*subsystem
	for _, sc := range s.cfg.Subsystems {
		if sub := s.subsystems[sc.NQN]; sub != nil {
			subs = append(subs, sub)
		}
	}
	subs = append(subs, s.disc)
	ports := s.sortedPorts()
	s.regMu.RUnlock()

	// Sum the live queues and the closed ones under met.mu, so that a queue
	// closing meanwhile is counted exactly once.
	m := s.met
	m.mu.Lock()
	var live []queueView
	for _, p := range ports {
		for _, q := range p.queueList() {
			if q.folded {
				continue
			}
			live = append(live, queueView{q: q, ctrl: q.ctrl.Load(), conn: q.conn.Load(), tconn: q.tconn.Load()})
		}
	}
	slices.SortFunc(live, func(a, b queueView) int {
		switch {
		case a.ctrl != b.ctrl && a.ctrl != nil && b.ctrl != nil:
			if a.ctrl.sub.nqn != b.ctrl.sub.nqn {
				if a.ctrl.sub.nqn < b.ctrl.sub.nqn {
					return -1
				}
				return 1
			}
			return int(a.ctrl.cntlid) - int(b.ctrl.cntlid)
		case a.ctrl == nil && b.ctrl != nil:
			return 1
		case a.ctrl != nil && b.ctrl == nil:
			return -1
		}
		return int(a.q.qid) - int(b.q.qid)
	})
	subSnap := map[string]*cmdSnap{}
	subInflight := map[string]int64{}
	for nqn, r := range m.retiredSub {
		sn := *r
		subSnap[nqn] = &sn
	}
	type ctrlView struct {
		c        *controller
		snap     cmdSnap
		inflight int64
		queues   []int // indices in live
	}
	ctrlIdx := map[*controller]int{}
	var ctrls []*ctrlView
	queueSnaps := make([]cmdSnap, len(live))
	portTotals := map[uint16]qpTotals{}
	for id, t := range m.retiredPort {
		cp := *t
		cp.terms, cp.tcpTerms = map[termKey]uint64{}, map[tcpTermKey]uint64{}
		for k, v := range t.terms {
			cp.terms[k] = v
		}
		for k, v := range t.tcpTerms {
			cp.tcpTerms[k] = v
		}
		portTotals[id] = cp
	}
	qpStats := make([]rdma.QPStats, len(live))
	for i, v := range live {
		queueSnaps[i].addStats(&v.q.met)
		if v.conn != nil {
			qpStats[i] = v.conn.QPStats()
			t := portTotals[v.q.port.id]
			t.addQP(qpStats[i])
			portTotals[v.q.port.id] = t
		}
		if v.tconn != nil {
			t := portTotals[v.q.port.id]
			t.addTCP(v.tconn.Stats())
			portTotals[v.q.port.id] = t
		}
		if v.ctrl == nil {
			continue
		}
		nqn := v.ctrl.sub.nqn
		sn := subSnap[nqn]
		if sn == nil {
			sn = &cmdSnap{}
			subSnap[nqn] = sn
		}
		sn.add(&queueSnaps[i])
		inf := v.q.inflight.Load()
		subInflight[nqn] += inf
		k, ok := ctrlIdx[v.ctrl]
		if !ok {
			k = len(ctrls)
			ctrlIdx[v.ctrl] = k
			cv := &ctrlView{c: v.ctrl}
			cv.snap.addStats(&v.ctrl.retiredMet)
			ctrls = append(ctrls, cv)
		}
		cv := ctrls[k]
		cv.snap.add(&queueSnaps[i])
		cv.inflight += inf
		cv.queues = append(cv.queues, i)
	}
	m.mu.Unlock()

	// Subsystems.
	for _, sub := range subs {
		sn := subSnap[sub.nqn]
		if sn == nil {
			sn = &cmdSnap{}
		}
		emitCmds(ch, dSubCommands, sn, sub.nqn)
		counter(dSubBytes, sn.rbytes, sub.nqn, "read")
		counter(dSubBytes, sn.wbytes, sub.nqn, "write")
		for op := range sn.lat {
			emitHist(ch, dSubLatency, &sn.lat[op], sub.nqn, latOpNames[op])
		}
		gauge(dSubInflight, float64(subInflight[sub.nqn]), sub.nqn)
		gauge(dSubCtrls, float64(len(sub.controllers())), sub.nqn)
		if !sub.disc {
			c.collectNamespaces(ch, sub)
		}
	}

	// Controllers (capped) and their queues.
	unlabelled := 0
	for i, cv := range ctrls {
		if i >= c.maxCtrls {
			unlabelled++
			continue
		}
		ct := cv.c
		cntlid := strconv.Itoa(int(ct.cntlid))
		lv := []string{ct.sub.nqn, cntlid, ct.hostNQN}
		gauge(dCtrlInfo, 1, ct.sub.nqn, cntlid, ct.hostNQN, strconv.Itoa(int(ct.port.id)))
		emitCmds(ch, dCtrlCommands, &cv.snap, lv...)
		counter(dCtrlBytes, cv.snap.rbytes, append(lv, "read")...)
		counter(dCtrlBytes, cv.snap.wbytes, append(lv, "write")...)
		for op := range cv.snap.lat {
			emitHist(ch, dCtrlLatency, &cv.snap.lat[op], append(lv, latOpNames[op])...)
		}
		gauge(dCtrlInflight, float64(cv.inflight), lv...)
		ct.mu.Lock()
		ioq := ct.ioQueues
		ct.mu.Unlock()
		gauge(dCtrlQueues, float64(ioq), lv...)
		for _, i := range cv.queues {
			c.collectQueue(ch, live[i], &queueSnaps[i], qpStats[i], ct.sub.nqn, cntlid)
		}
	}
	gauge(dCtrlUnlabelled, float64(unlabelled))

	// Ports.
	for _, p := range ports {
		id := strconv.Itoa(int(p.id))
		s.regMu.RLock()
		addr := p.cfg.ListenAddress()
		s.regMu.RUnlock()
		l := 0.0
		if p.listening.Load() {
			l = 1
		}
		gauge(dPortListen, l, id, addr)
		gauge(dPortQueues, float64(len(p.queueList())), id)
		t := portTotals[p.id]
		counter(dPortFPDUs, t.fpdusSent, id, "sent")
		counter(dPortFPDUs, t.fpdusRecv, id, "received")
		counter(dPortCRC, t.crcErrors, id)
		for k, v := range t.terms {
			dir := "received"
			if k.sent {
				dir = "sent"
			}
			counter(dTerminates, v, id, dir, termLayerName(uint8(k.cause>>12)), strconv.Itoa(int(k.cause>>8)&0xF), fmt.Sprintf("0x%02x", uint8(k.cause)))
		}
		if p.cfg.IsTCP() {
			counter(dTCPPDUs, t.tcpPDUsSent, id, "sent")
			counter(dTCPPDUs, t.tcpPDUsRecv, id, "received")
			counter(dTCPDigest, t.hdgstErrors, id, "header")
			counter(dTCPDigest, t.ddgstErrors, id, "data")
			for k, v := range t.tcpTerms {
				dir := "received"
				if k.sent {
					dir = "sent"
				}
				counter(dTCPTermReqs, v, id, dir, k.fes.String())
			}
		}
	}

	// Admission and events.
	refused := map[string]uint64{"host_not_allowed": 0, "invalid_parameters": 0, "controller_busy": 0}
	if s.adm != nil {
		a := s.adm.Stats()
		gauge(dConnections, float64(a.Pending), "pending")
		gauge(dConnections, float64(a.Connections-a.Pending), "admitted")
		counter(dAdmission, a.Accepted, "accepted")
		counter(dAdmission, a.Admitted, "admitted")
		counter(dAdmission, a.Refused, "refused")
		counter(dAdmission, a.Evicted, "evicted")
		counter(dAdmission, a.TimedOut, "timed_out")
		refused["max_connections"] = a.Refused
		refused["pending_evicted"] = a.Evicted
		refused["pending_timeout"] = a.TimedOut
	}
	m.evMu.Lock()
	events := make(map[eventKey]uint64, len(m.events))
	for k, v := range m.events {
		events[k] = v
	}
	m.evMu.Unlock()
	ka, created, recon, auth := map[string]uint64{}, map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	for _, sub := range subs {
		ka[sub.nqn], created[sub.nqn], recon[sub.nqn], auth[sub.nqn] = 0, 0, 0, 0
	}
	for k, v := range events {
		switch k.name {
		case eventRefused:
			refused[k.reason] += v
		case eventKeepAliveExpired:
			ka[k.sub] += v
		case eventControllerCreated:
			created[k.sub] += v
		case eventReconnect:
			recon[k.sub] += v
		case eventAuthFailure:
			auth[k.sub] += v
		case eventControllerEnded:
			counter(dCtrlEnded, v, k.sub, k.reason)
		}
	}
	for r, v := range refused {
		counter(dRefused, v, r)
	}
	for nqn, v := range ka {
		counter(dKAExpired, v, nqn)
	}
	for nqn, v := range created {
		counter(dCtrlCreated, v, nqn)
	}
	for nqn, v := range recon {
		counter(dReconnects, v, nqn)
	}
	for nqn, v := range auth {
		counter(dAuthFailures, v, nqn)
	}
}

// collectQueue emits one live queue's series.
func (c *collector) collectQueue(ch chan<- prometheus.Metric, v queueView, sn *cmdSnap, qs rdma.QPStats, nqn, cntlid string) {
	q := v.q
	lv := []string{nqn, cntlid, strconv.Itoa(int(q.qid))}
	emitCmds(ch, dQueueCommands, sn, lv...)
	ch <- prometheus.MustNewConstMetric(dQueueBytes, prometheus.CounterValue, float64(sn.rbytes), append(lv, "read")...)
	ch <- prometheus.MustNewConstMetric(dQueueBytes, prometheus.CounterValue, float64(sn.wbytes), append(lv, "write")...)
	ch <- prometheus.MustNewConstMetric(dQueueInflight, prometheus.GaugeValue, float64(q.inflight.Load()), lv...)
	ch <- prometheus.MustNewConstMetric(dQueueSize, prometheus.GaugeValue, float64(q.size), lv...)
	if v.conn == nil {
		return
	}
	st := v.conn.Stats()
	ch <- prometheus.MustNewConstMetric(dQueueBacklog, prometheus.GaugeValue, float64(st.Backlog), lv...)
	ch <- prometheus.MustNewConstMetric(dQueueWaiting, prometheus.GaugeValue, float64(st.Waiting), lv...)
	for _, name := range qpStateNames {
		val := 0.0
		if name == qs.State {
			val = 1
		}
		ch <- prometheus.MustNewConstMetric(dQPState, prometheus.GaugeValue, val, append(lv, name)...)
	}
	ch <- prometheus.MustNewConstMetric(dQPFPDUs, prometheus.CounterValue, float64(qs.FPDUsSent), append(lv, "sent")...)
	ch <- prometheus.MustNewConstMetric(dQPFPDUs, prometheus.CounterValue, float64(qs.FPDUsReceived), append(lv, "received")...)
	if ti, err := v.conn.TCPInfo(); err == nil {
		ch <- prometheus.MustNewConstMetric(dQPRTT, prometheus.GaugeValue, ti.RTT.Seconds(), lv...)
		ch <- prometheus.MustNewConstMetric(dQPRetrans, prometheus.CounterValue, float64(ti.Retransmits), lv...)
		ch <- prometheus.MustNewConstMetric(dQPCwnd, prometheus.GaugeValue, float64(ti.Cwnd), lv...)
		ch <- prometheus.MustNewConstMetric(dQPUnacked, prometheus.GaugeValue, float64(ti.Unacked), lv...)
		ch <- prometheus.MustNewConstMetric(dQPNotSent, prometheus.GaugeValue, float64(ti.NotSentBytes), lv...)
	}
}

// qpStateNames are the QP states (iwarp.QPState's names).
var qpStateNames = []string{"idle", "rts", "closing", "terminate", "error"}

// collectNamespaces emits the namespaces of a subsystem.
func (c *collector) collectNamespaces(ch chan<- prometheus.Metric, sub *subsystem) {
	tab := sub.ns.Load()
	ids := make([]uint32, 0, len(tab.byID))
	for id := range tab.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ns := tab.byID[id]
		nsid := strconv.FormatUint(uint64(id), 10)
		for _, state := range []string{NamespaceOnline, NamespaceDisabled, NamespaceFailed} {
			v := 0.0
			if ns.state == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(dNSState, prometheus.GaugeValue, v, sub.nqn, nsid, state)
		}
		size := float64(0)
		if ns.be != nil {
			size = float64(ns.nsze.Load() << ns.lbaShift)
		}
		ch <- prometheus.MustNewConstMetric(dNSSize, prometheus.GaugeValue, size, sub.nqn, nsid)
		cnt := func(d *prometheus.Desc, v uint64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{sub.nqn, nsid}, lv...)...)
		}
		cnt(dNSCommands, ns.readCmds.Load(), "read")
		cnt(dNSCommands, ns.writeCmds.Load(), "write")
		cnt(dNSCommands, ns.otherCmds.Load(), "other")
		cnt(dNSBytes, ns.readBytes.Load(), "read")
		cnt(dNSBytes, ns.writeBytes.Load(), "write")
		cnt(dNSErrors, ns.errors.Load())
		cnt(dNSMediaErrors, ns.mediaErrors.Load())
		for op := range ns.met.lat {
			var h histSnap
			ns.met.lat[op].AddTo(&h)
			emitHist(ch, dNSLatency, &h, sub.nqn, nsid, latOpNames[op])
		}
		if st := ns.backendStats(); st != nil {
			cnt(dNSNowait, st.NowaitDone, "done")
			cnt(dNSNowait, st.NowaitMissed, "missed")
			cnt(dNSSlowPaths, st.BounceReads, "bounce_read")
			cnt(dNSSlowPaths, st.BounceWrites, "bounce_write")
			cnt(dNSSlowPaths, st.ZeroFallbacks, "zero_fallback")
			if ns.info.Kind == backend.KindMemory {
				ch <- prometheus.MustNewConstMetric(dNSAllocated, prometheus.GaugeValue, float64(st.AllocatedBytes), sub.nqn, nsid)
			}
		}
	}
}

// emitCmds emits the non-zero command counters of a snapshot (success
// counters of reads and writes always, so that rates exist from the
// start).
func emitCmds(ch chan<- prometheus.Metric, d *prometheus.Desc, sn *cmdSnap, lv ...string) {
	for op := range sn.cmds {
		for st := range sn.cmds[op] {
			v := sn.cmds[op][st]
			if v == 0 && !(st == int(stSuccess) && (op == int(opRead) || op == int(opWrite))) {
				continue
			}
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(lv, opClassNames[op], statusClassNames[st])...)
		}
	}
}

// emitHist emits a histogram snapshot in the export layout (lathist.Export:
// one bucket per octave, 25 bounds and +Inf), and nothing for a histogram
// that never counted a value: an object that never saw the operation (the
// discovery subsystem's reads and writes, an idle namespace, a controller
// that only reads) costs no series (issue 23.10). The series appears with
// its first value (rate() misses the increase of that first scrape
// interval only); the dashboard and the rules aggregate with sum by, which
// takes series that appear later.
func emitHist(ch chan<- prometheus.Metric, d *prometheus.Desc, h *histSnap, lv ...string) {
	buckets, count := h.Export()
	if count == 0 {
		return
	}
	ch <- prometheus.MustNewConstHistogram(d, count, float64(h.Sum)/1e9, buckets, lv...)
}

// termLayerName names the layer of a Terminate's cause (RFC 5040 §7.1).
func termLayerName(l uint8) string {
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
