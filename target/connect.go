package target

import (
	"errors"
	"math/bits"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// connectData runs a Connect whose 1024 bytes of data have arrived. The
// checks and their statuses follow nvmet (drivers/nvme/target/
// fabrics-cmd.c: nvmet_execute_admin_connect, nvmet_execute_io_connect,
// nvmet_install_queue; core.c: nvmet_alloc_ctrl, nvmet_ctrl_find_get).
func (q *queue) connectData(r request) {
	cmd := r.SQE().ConnectCmd()
	if cmd.RECFMT() != 0 {
		q.connectFailed(r, "unsupported record format", nvmeof.StatusConnectIncompatibleFormat|nvmeof.StatusDNR, 0, "")
		return
	}
	d, err := nvmeof.ParseConnectData(r.Data())
	if err != nil {
		var pe *nvmeof.ConnectParamError
		var result uint32
		if errors.As(err, &pe) {
			result = pe.Result()
		}
		q.connectFailed(r, err.Error(), nvmeof.StatusFromError(err), result, "")
		return
	}
	// The queue was sized by the CM request for its QID (admin queues get
	// 32 entries and small buffers): Connect must name the same queue.
	if cmd.QID() != q.qid {
		q.connectFailed(r, "QID differs from the RDMA CM request's", nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffQID), d.HostNQN())
		return
	}
	if cmd.QID() == 0 {
		// A new association must not write before the commands of the
		// host's previous one (gone, but still running at a backend)
		// have finished: their writes would land after the new ones.
		if chans := q.s.drains.pending(d.HostNQN(), d.SubNQN()); len(chans) > 0 {
			timeout := q.s.connectTimeout()
			q.s.drainWaits.Add(1)
			go func() {
				defer q.s.drainWaits.Add(-1)
				if !waitDrained(chans, timeout) {
					q.connectFailed(r, "the host's previous association still has commands running at a backend", nvmeof.StatusConnectControllerBusy, 0, d.HostNQN())
					return
				}
				q.adminConnect(r, cmd, d)
			}()
			return
		}
		q.adminConnect(r, cmd, d)
	} else {
		q.ioConnect(r, cmd, d)
	}
}

// connectFailed answers a failed Connect and logs why.
func (q *queue) connectFailed(r request, why string, st nvmeof.Status, result uint32, host string) {
	lf := append(q.fields(), zap.String("reason", why), zap.Stringer("status", st))
	if host != "" {
		lf = append(lf, zap.String("host_nqn", host))
	}
	q.s.adm.Log(zap.WarnLevel, "connect_refused", "connect refused", lf...)
	q.s.met.event(eventRefused, "", connectRefusedReason(st))
	q.connectDone(r, st, result)
}

// checkSQSize applies nvmet_install_queue's SQSIZE rules: not zero and, for
// I/O queues, at most CAP.MQES; besides, a queue cannot be larger than the
// receive buffers the RDMA CM request made us post.
func (q *queue) checkSQSize(cmd nvmeof.ConnectCmd, mqes int) bool {
	if cmd.SQSize() == 0 || cmd.QueueSize() > q.size {
		return false
	}
	return q.qid == 0 || int(cmd.SQSize()) <= mqes
}

// subsystemFor returns the subsystem a Connect on this port may reach:
// the discovery subsystem, or one of the subsystems the port serves
// (nvmet_find_get_subsys). The caller holds regMu.
func (q *queue) subsystemFor(nqn string) *subsystem {
	s := q.s
	if nvmeof.IsDiscoveryNQN(nqn) {
		return s.disc
	}
	if !q.port.serves(nqn) {
		return nil
	}
	return s.subsystems[nqn]
}

func (q *queue) adminConnect(r request, cmd nvmeof.ConnectCmd, d *nvmeof.ConnectData) {
	s := q.s
	host, subnqn := d.HostNQN(), d.SubNQN()
	if d.CNTLID() != nvmeof.CNTLIDDynamic {
		q.connectFailed(r, "admin connect for a static controller ID", nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffCNTLID), host)
		return
	}
	// regMu is held until the controller is registered, so that a reload
	// removing the subsystem or the host sees the controller and tears it
	// down.
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	sub := q.subsystemFor(subnqn)
	if sub == nil {
		q.connectFailed(r, "unknown subsystem "+subnqn, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffSUBNQN), host)
		return
	}
	if !sub.hostAllowed(host) {
		q.connectFailed(r, "host not allowed by subsystem "+subnqn, nvmeof.StatusConnectInvalidHost|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffHOSTNQN), host)
		return
	}
	pc := q.port.cfg
	if !q.checkSQSize(cmd, pc.MaxQueueSize-1) {
		q.connectFailed(r, "invalid SQSIZE", nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffSQSIZE), host)
		return
	}
	tun := s.cfg.Tuning
	if err := s.hostUse.take(host, 1, 1, &s.cfg.Limits); err != nil {
		q.connectFailed(r, err.Error(), nvmeof.StatusConnectControllerBusy, 0, host)
		return
	}
	k, required := s.hostAuth(sub, &pc, host)
	c := &controller{
		s: s, sub: sub, hostNQN: host, hostID: d.HostID(), port: q.port, remote: q.remote,
		inline: pc.InlineDataSize, maxQueue: pc.MaxQueueSize, created: time.Now(),
		io: newIORef(), authRequired: required,
	}
	if conn := q.link(); conn != nil && conn.MaxTransferSize() >= 4096 {
		c.mdts = uint8(bits.TrailingZeros(uint(conn.MaxTransferSize())) - 12)
	}
	c.cap.SetMQES(uint16(pc.MaxQueueSize - 1))
	c.cap.SetCQR(true)
	c.cap.SetTO(capTimeout)
	c.cap.SetCSS(nvmeof.CAPCSSNVM) // not bit 43: CC.CSS stays NVM (protocol.md §12.10)
	if !sub.disc {
		c.maxQID = tun.MaxIOQueues
	}
	c.aenEnable, _ = c.supportedAEC()
	c.queues = make([]*queue, c.maxQID+1)
	c.queues[0] = q
	kato := keepAliveTimeout(cmd.KATO(), &tun, sub.disc)
	if !sub.addController(c, func() {
		c.log = s.log.With(zap.String("host_nqn", host), zap.Stringer("remote", q.remote), zap.Uint16("cntlid", c.cntlid), zap.String("subsystem", sub.nqn))
		// nvmet starts the timer at once: a host that dies before it
		// enables the controller is cleaned up too.
		c.ka = newKeepAlive(kato, c.expired)
	}) {
		s.hostUse.give(host, 1, 1)
		q.connectFailed(r, "no free controller ID", nvmeof.StatusConnectControllerBusy|nvmeof.StatusDNR, 0, host)
		return
	}
	resp, err := q.setupAuth(c, k, required, 0)
	if err != nil {
		c.teardown("authentication setup failed")
		s.hostUse.give(host, 0, 1)
		q.connectFailed(r, err.Error(), nvmeof.StatusInternalError|nvmeof.StatusDNR, 0, host)
		return
	}
	q.host = host
	q.ctrl.Store(c)
	lf := []zap.Field{zap.Uint16("port_id", q.port.id), zap.Bool("discovery", sub.disc), zap.Bool("auth_required", required),
		zap.Duration("kato", kato), zap.Uint32("requested_kato_ms", cmd.KATO())}
	if hc := s.cfg.Host(host); hc != nil && hc.Description != "" {
		lf = append(lf, zap.String("host", hc.Description))
	}
	c.logBulk(zap.InfoLevel, "controller_created", "controller created", lf...)
	s.met.controllerCreated(sub.nqn, host)
	if q.isClosed() {
		// The connection ended while we were connecting it, and
		// QueueClosed may not have seen the controller.
		c.teardown(reasonAdminQueueClosed)
	}
	q.connectDone(r, nvmeof.StatusSuccess, uint32(resp))
}

func (q *queue) ioConnect(r request, cmd nvmeof.ConnectCmd, d *nvmeof.ConnectData) {
	s := q.s
	host, subnqn := d.HostNQN(), d.SubNQN()
	s.regMu.RLock()
	sub := q.subsystemFor(subnqn)
	var k *hostKeys
	var required bool
	if sub != nil {
		k, required = s.hostAuth(sub, &q.port.cfg, host)
	}
	s.regMu.RUnlock()
	if sub == nil {
		q.connectFailed(r, "unknown subsystem "+subnqn, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffSUBNQN), host)
		return
	}
	c := sub.findController(d.CNTLID(), host)
	if c == nil || c.dead.Load() {
		q.connectFailed(r, "no such controller", nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR,
			nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffCNTLID), host)
		return
	}
	// An I/O queue of a controller that authenticated must authenticate
	// too, whatever a reload changed since.
	required = required || c.authRequired
	qid := cmd.QID()
	s.regMu.RLock()
	lim := s.cfg.Limits
	s.regMu.RUnlock()
	if err := s.hostUse.take(host, 0, 1, &lim); err != nil {
		q.connectFailed(r, err.Error(), nvmeof.StatusConnectControllerBusy, 0, host)
		return
	}
	c.mu.Lock()
	var st nvmeof.Status
	var result uint32
	var why string
	switch {
	case c.dead.Load():
		st, result, why = nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataOffCNTLID), "no such controller"
	case int(qid) > c.maxQID:
		st, result, why = nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffQID), "QID beyond the controller's queues"
	case cmd.SQSize() == 0:
		st, result, why = nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffSQSIZE), "SQSIZE 0"
	case c.queues[qid] != nil:
		// nvmet_install_queue: "qid %u has already been created".
		st, why = nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR, "queue already connected"
	case !q.checkSQSize(cmd, c.maxQueue-1):
		st, result, why = nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, nvmeof.ConnectInvalidParamResult(false, nvmeof.ConnectSQEOffSQSIZE), "SQSIZE beyond CAP.MQES"
	case required && len(c.unauth) >= c.maxQID-c.ioQueues:
		// Unauthenticated I/O queues count against the controller's free
		// QIDs (they hold none yet): a peer that forged the host's NQN
		// cannot attach more of them than the real host could queues.
		st, why = nvmeof.StatusConnectControllerBusy, "as many unauthenticated I/O queues as free queue IDs"
	case !required:
		c.queues[qid] = q
		c.ioQueues++
		c.ioSize = cmd.QueueSize()
	default:
		if c.unauth == nil {
			c.unauth = map[*queue]bool{}
		}
		c.unauth[q] = true
	}
	// A queue that must authenticate takes its QID only once it has
	// (installQueue): an unauthenticated peer cannot hold it.
	c.mu.Unlock()
	if st != nvmeof.StatusSuccess {
		s.hostUse.give(host, 0, 1)
		if st.Code() == nvmeof.StatusCommandSequenceError {
			result = uint32(c.cntlid) // nvmet passes back the CNTLID
		}
		q.connectFailed(r, why, st, result, host)
		return
	}
	resp, err := q.setupAuth(c, k, required, cmd.QueueSize())
	if err != nil {
		s.hostUse.give(host, 0, 1)
		q.connectFailed(r, err.Error(), nvmeof.StatusInternalError|nvmeof.StatusDNR, 0, host)
		return
	}
	q.host = host
	q.ctrl.Store(c)
	if q.isClosed() {
		c.queueClosed(q)
	}
	c.logBulk(zap.InfoLevel, "io_queue_connected", "I/O queue connected", zap.Uint16("qid", qid), zap.Int("size", cmd.QueueSize()), zap.Stringer("queue_remote", q.remote), zap.Bool("auth_required", required))
	q.connectDone(r, nvmeof.StatusSuccess, uint32(resp))
}
