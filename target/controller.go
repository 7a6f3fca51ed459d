package target

import (
	"net"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Controller limits and identity values.
const (
	// maxAERs is the number of Asynchronous Event Requests a controller
	// holds (Identify AERL is this minus one; nvmet NVMET_ASYNC_EVENTS).
	maxAERs = 4
	// maxPendingEvents bounds the events waiting for an AER. Events are
	// masked until the host reads their log page, so a few suffice.
	maxPendingEvents = 16
	// errorLogSlots is the size of the Error Information log (ELPE+1,
	// nvmet NVMET_ERROR_LOG_SLOTS).
	errorLogSlots = 128
	// capTimeout is CAP.TO, the enable timeout in 500 ms units: 7.5 s as
	// nvmet.
	capTimeout = 15
)

// versionReported is the NVMe version in VS and Identify VER: 1.3, as
// nvmet reported for years. 1.3 makes the Linux host read the namespace
// identification descriptors (CNS 3, which we serve) and try CNS 8; 1.4 and
// 2.0 would oblige features we do not implement (for 2.0: the I/O command
// set profile machinery, CAP.CSS bit 43 handling of CC.CSS=6, and more).
var versionReported = nvmeof.VS1_3

// controller is one association between a host and a subsystem (or the
// discovery subsystem): an admin queue and up to maxQID I/O queues.
type controller struct {
	s       *server
	sub     *subsystem
	cntlid  uint16
	hostNQN string
	hostID  [16]byte
	port    *port
	remote  net.Addr // of the admin queue
	// inline and maxQueue are the port's settings when the controller was
	// created (IOCCSZ, CAP.MQES and MAXCMD must not change under a host).
	inline   int
	maxQueue int
	mdts     uint8
	cap      nvmeof.CAP
	created  time.Time
	log      *zap.Logger
	ka       *keepAlive
	// io counts the commands running at a backend (see ioRef).
	io *ioRef

	// csts mirrors CSTS for the lock-free ready check of every command.
	csts atomic.Uint32
	dead atomic.Bool
	// revoked is set when a reload disallows the host: from then on its
	// I/O is refused (Access Denied) until the controller is torn down.
	revoked atomic.Bool
	// shutdown: the host notified a shutdown (CC.SHN), so the end of the
	// association that follows is a clean one.
	shutdown atomic.Bool
	// slotGiven: the controller no longer counts against the host's
	// limits.max_controllers_per_host (releaseHostSlot).
	slotGiven atomic.Bool
	// authRequired: the host had to authenticate the admin queue, so every
	// I/O queue must authenticate too.
	authRequired bool

	mu perfcount.Mutex
	cc nvmeof.CC
	// queues by QID; queues[0] is the admin queue.
	queues []*queue
	// unauth are I/O queues connected but not yet authenticated: they
	// hold no QID (auth.go), and go with the controller.
	unauth    map[*queue]bool
	maxQID    int // I/O queues allowed (Set Features Number of Queues)
	ioQueues  int
	ioSize    int  // size of the I/O queues connected
	nqSet     bool // Number of Queues was set
	aenEnable uint32
	aenMasked uint32
	aers      []request
	events    []nvmeof.AEN
	changed   []uint32
	chOver    bool // more than 1024 namespaces changed
	errLog    [errorLogSlots]nvmeof.ErrorLogEntry
	errCount  uint64
	// retired holds the counters of I/O queues that have closed.
	retired IOCounters
	// retiredMet sums the metrics of its I/O queues that have closed.
	retiredMet cmdStats
}

// supportedAEC is what Set Features Asynchronous Event Configuration
// accepts and what Identify OAES advertises (besides the SMART critical
// warning bits 4..0 that AEC always allows): namespace attribute notices
// for I/O controllers (no ANA: CMIC bit 3 is clear), discovery log change
// notices for discovery controllers (nvmet NVMET_AEN_CFG_OPTIONAL and
// NVMET_DISC_AEN_CFG_OPTIONAL).
func (c *controller) supportedAEC() (oaes, aec uint32) {
	if c.sub.disc {
		return nvmeof.AECDiscoveryChange, nvmeof.AECDiscoveryChange
	}
	const smart = nvmeof.SMARTCritSpare | nvmeof.SMARTCritTemperature | nvmeof.SMARTCritReliability |
		nvmeof.SMARTCritReadOnly | nvmeof.SMARTCritVolatileMemory
	return nvmeof.AECNSAttr | nvmeof.AECANAChange, nvmeof.AECNSAttr | nvmeof.AECANAChange | smart
}

// ready reports CSTS.RDY: the controller takes commands other than
// Connect and Property Get/Set.
func (c *controller) ready() bool { return nvmeof.CSTS(c.csts.Load()).RDY() }

// propertyGet reads a controller property (nvmet_execute_prop_get): CAP
// as 8 bytes; VS, CC and CSTS as 4 bytes. Anything else is Invalid Field.
func (c *controller) propertyGet(size8 bool, offset uint32) (uint64, nvmeof.Status) {
	if size8 {
		if offset == nvmeof.PropCAP {
			return uint64(c.cap), nvmeof.StatusSuccess
		}
		return 0, nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	switch offset {
	case nvmeof.PropVS:
		return uint64(versionReported), nvmeof.StatusSuccess
	case nvmeof.PropCC:
		c.mu.Lock()
		defer c.mu.Unlock()
		return uint64(c.cc), nvmeof.StatusSuccess
	case nvmeof.PropCSTS:
		return uint64(c.csts.Load()), nvmeof.StatusSuccess
	}
	return 0, nvmeof.StatusInvalidField | nvmeof.StatusDNR
}

// propertySet writes a property: only CC, 4 bytes (nvmet_execute_prop_set).
func (c *controller) propertySet(size8 bool, offset uint32, value uint64) nvmeof.Status {
	if size8 || offset != nvmeof.PropCC {
		return nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	c.updateCC(nvmeof.CC(uint32(value)))
	return nvmeof.StatusSuccess
}

// updateCC applies a CC write as nvmet_update_cc does: enabling checks the
// queue entry sizes (I/O controllers), MPS, AMS and CSS and either sets
// CSTS.RDY or CSTS.CFS; disabling clears RDY and CC; a shutdown
// notification completes the shutdown (SHST=2) after flushing the
// subsystem's namespaces, so nothing the host wrote is left in a volatile
// cache when it disconnects.
func (c *controller) updateCC(v nvmeof.CC) {
	c.mu.Lock()
	old := c.cc
	c.cc = v
	csts := nvmeof.CSTS(c.csts.Load())
	if v.EN() && !old.EN() {
		csts = c.startLocked()
	}
	if !v.EN() && old.EN() {
		csts.SetRDY(false)
		c.cc = 0
	}
	shutdown := false
	if v.SHN() != nvmeof.CCSHNNone && old.SHN() == nvmeof.CCSHNNone {
		csts.SetRDY(false)
		c.cc = 0
		shutdown = true
		csts.SetSHST(nvmeof.SHSTOccurring)
	}
	if v.SHN() == nvmeof.CCSHNNone && old.SHN() != nvmeof.CCSHNNone {
		csts.SetSHST(nvmeof.SHSTNormal)
	}
	c.csts.Store(uint32(csts))
	c.mu.Unlock()
	if v.EN() && !old.EN() {
		c.ka.reset()
	}
	if shutdown {
		c.shutdown.Store(true)
		c.log.Debug("shutdown notification")
		c.s.goFlush(c.sub, func() {
			c.mu.Lock()
			cs := nvmeof.CSTS(c.csts.Load())
			if cs.SHST() == nvmeof.SHSTOccurring {
				cs.SetSHST(nvmeof.SHSTComplete)
				c.csts.Store(uint32(cs))
			}
			c.mu.Unlock()
		})
	}
}

// startLocked is nvmet_start_ctrl: the CSTS after CC.EN goes 0 → 1.
func (c *controller) startLocked() nvmeof.CSTS {
	var csts nvmeof.CSTS
	cc := c.cc
	// Only I/O controllers check the queue entry sizes; the spec wants 0
	// from discovery hosts, which nvmet does not enforce for compatibility.
	if !c.sub.disc && (cc.IOSQES() != 6 || cc.IOCQES() != 4) {
		csts.SetCFS(true)
		return csts
	}
	if cc.MPS() != 0 || cc.AMS() != nvmeof.CCAMSRR || (cc.CSS() != nvmeof.CCCSSNVM && cc.CSS() != nvmeof.CCCSSCSI) {
		csts.SetCFS(true)
		return csts
	}
	csts.SetRDY(true)
	return csts
}

// keepAliveTimeout turns a KATO in milliseconds into the timeout applied
// (nvmet_alloc_ctrl, nvmet_set_feat_kato): rounded up to whole seconds and
// clamped to the configured range. KATO 0 gets the configured default
// (tuning.keep_alive, 120 s; nvmet does this for discovery controllers):
// nvmet lets KATO 0 disable keep alive on an I/O controller, which would
// let any host leave a controller behind forever, so here every controller
// has a keep-alive timer.
func keepAliveTimeout(kato uint32, tun *TuningConfig, disc bool) time.Duration {
	d := time.Duration((uint64(kato)+999)/1000) * time.Second
	if d == 0 {
		d = tun.KeepAlive
	}
	return min(max(d, tun.KeepAliveMin), tun.KeepAliveMax)
}

// expired is the keep-alive timer's end: the host is gone, the controller
// and all its queues are torn down.
func (c *controller) expired() {
	c.s.met.event(eventKeepAliveExpired, c.sub.nqn, "")
	c.log.Warn("keep-alive timeout expired: tearing down the controller", zap.Duration("kato", c.ka.get()))
	c.teardown("keep-alive timeout")
}

// teardown ends the controller: it leaves its subsystem (its CNTLID can be
// reused later), its keep-alive timer stops, its queues disconnect, and
// held AERs are released. It may be called from any goroutine, more than
// once.
func (c *controller) teardown(reason string) {
	if c.dead.Swap(true) {
		return
	}
	clean := c.shutdown.Load()
	if clean && reason == reasonAdminQueueClosed {
		// The host shut the controller down, then disconnected.
		reason = reasonHostShutdown
	}
	c.mu.Lock()
	admin := c.queues[0]
	c.mu.Unlock()
	c.s.met.controllerEnded(c.sub.nqn, c.hostNQN, reasonLabel(reason), clean, admin != nil && admin.authorized())
	c.ka.stop()
	c.sub.removeController(c)
	// Commands not yet at a backend are dropped from now on; a new
	// association of the host waits for those that are.
	c.s.drains.add(c, c.io.close())
	c.releaseHostSlot()
	c.mu.Lock()
	queues := slices.Clone(c.queues)
	for q := range c.unauth {
		queues = append(queues, q)
	}
	aers := c.aers
	c.aers = nil
	c.csts.Store(0)
	c.mu.Unlock()
	c.logBulk(zap.InfoLevel, "controller_removed", "controller removed", zap.String("reason", reason))
	for _, q := range queues {
		if q != nil {
			q.close()
		}
	}
	for _, r := range aers {
		// The admin queue is closing: this only releases the request
		// (nvmet_async_events_failall answers Internal Error).
		queues[0].completeHeld(r, nvmeof.StatusInternalError|nvmeof.StatusDNR)
	}
}

// logBulk logs a line about the controller that a peer can cause in bulk
// (controller created or removed, I/O queue connected: any peer that
// reaches a port can connect, and with a forged host NQN fail to
// authenticate, in a loop) through the rate-limited log, with the
// controller's fields (those of c.log).
func (c *controller) logBulk(level zapcore.Level, event, msg string, fields ...zap.Field) {
	lf := append([]zap.Field{zap.String("host_nqn", c.hostNQN), zap.Stringer("remote", c.remote),
		zap.Uint16("cntlid", c.cntlid), zap.String("subsystem", c.sub.nqn)}, fields...)
	if c.s.adm == nil {
		if ce := c.s.log.Check(level, msg); ce != nil {
			ce.Write(lf...)
		}
		return
	}
	c.s.adm.Log(level, event, msg, lf...)
}

// Teardown reasons that say how an association ended (the reason label of
// nvmetd_controllers_ended_total).
const (
	// reasonAdminQueueClosed: the admin queue's connection ended without a
	// shutdown notification (lost, or closed by a host that did not shut
	// the controller down).
	reasonAdminQueueClosed = "admin queue disconnected"
	// reasonHostShutdown: the host notified a shutdown (CC.SHN), then
	// disconnected: a clean end.
	reasonHostShutdown = "host shutdown"
)

// releaseHostSlot gives back, once, the controller's count against the
// host's limits.max_controllers_per_host: at its teardown, or earlier when
// its authentication failed.
func (c *controller) releaseHostSlot() {
	if !c.slotGiven.Swap(true) {
		c.s.hostUse.give(c.hostNQN, 1, 0)
	}
}

// queueClosed is called when one of the controller's queues has ended:
// the admin queue takes the controller with it; an I/O queue frees its QID.
func (c *controller) queueClosed(q *queue) {
	if q.qid == 0 {
		c.teardown(reasonAdminQueueClosed)
		return
	}
	c.mu.Lock()
	delete(c.unauth, q)
	if int(q.qid) < len(c.queues) && c.queues[q.qid] == q {
		c.queues[q.qid] = nil
		c.ioQueues--
		c.retired.add(q.counters())
	}
	c.mu.Unlock()
}

// asyncEventRequest holds an AER until an event occurs (never timed out).
func (c *controller) asyncEventRequest(q *queue, r request) {
	c.mu.Lock()
	if len(c.events) > 0 {
		ev := c.events[0]
		c.events = slices.Delete(c.events, 0, 1)
		c.mu.Unlock()
		r.SetResult(uint32(ev))
		q.respond(r, nvmeof.StatusSuccess)
		return
	}
	if len(c.aers) >= maxAERs {
		c.mu.Unlock()
		q.respond(r, nvmeof.StatusAsyncEventLimitExceeded|nvmeof.StatusDNR)
		return
	}
	if c.dead.Load() {
		c.mu.Unlock()
		q.hold(r)
		q.completeHeld(r, nvmeof.StatusInternalError|nvmeof.StatusDNR)
		return
	}
	c.aers = append(c.aers, r)
	q.hold(r)
	c.mu.Unlock()
}

// event raises an asynchronous event unless the host disabled it (Set
// Features Asynchronous Event Configuration) or one of its kind is already
// outstanding: an event stays masked until the host reads the log page it
// names (nvmet_aen_bit_disabled, nvmet_clear_aen_bit).
func (c *controller) event(aen nvmeof.AEN, bit uint32) {
	c.mu.Lock()
	if c.dead.Load() || c.aenEnable&bit == 0 || c.aenMasked&bit != 0 {
		c.mu.Unlock()
		return
	}
	c.aenMasked |= bit
	if len(c.aers) == 0 {
		if len(c.events) < maxPendingEvents {
			c.events = append(c.events, aen)
		}
		c.mu.Unlock()
		return
	}
	r := c.aers[len(c.aers)-1]
	c.aers = c.aers[:len(c.aers)-1]
	q := c.queues[0]
	c.mu.Unlock()
	r.SetResult(uint32(aen))
	c.log.Debug("asynchronous event", zap.Uint32("aen", uint32(aen)))
	q.completeHeld(r, nvmeof.StatusSuccess)
}

// unmask re-enables an event kind after its log page was read without
// Retain Asynchronous Event.
func (c *controller) unmask(bit uint32, rae bool) {
	if rae {
		return
	}
	c.mu.Lock()
	c.aenMasked &^= bit
	c.mu.Unlock()
}

// nsChanged records changed namespaces (nvmet_add_to_changed_ns_log) and
// raises a Namespace Attribute Changed event.
func (c *controller) nsChanged(nsids []uint32) {
	c.mu.Lock()
	for _, id := range nsids {
		if c.chOver || slices.Contains(c.changed, id) {
			continue
		}
		if len(c.changed) == nvmeof.MaxChangedNamespaces {
			c.chOver, c.changed = true, c.changed[:0]
			continue
		}
		c.changed = append(c.changed, id)
	}
	c.mu.Unlock()
	c.event(nvmeof.AENNSAttrChanged, nvmeof.AECNSAttr)
}

// takeChangedNS returns the Changed Namespace List page and clears it.
func (c *controller) takeChangedNS(page []byte) {
	c.mu.Lock()
	if c.chOver {
		nvmeof.EncodeChangedNSList(page, []uint32{nvmeof.NSIDAll})
	} else {
		nvmeof.EncodeChangedNSList(page, c.changed)
	}
	c.changed, c.chOver = c.changed[:0], false
	c.mu.Unlock()
}

// logError records a failed command in the Error Information log and
// returns its status with the More bit set, as nvmet_set_error does.
func (c *controller) logError(qid uint16, sqe *nvmeof.SQE, st nvmeof.Status) nvmeof.Status {
	c.mu.Lock()
	c.errCount++
	e := &c.errLog[c.errCount%errorLogSlots]
	*e = nvmeof.ErrorLogEntry{}
	e.SetErrorCount(c.errCount)
	e.SetSQID(qid)
	e.SetCID(sqe.CID())
	e.SetStatus(st)
	e.SetParamErrorLocation(0xFFFF)
	if qid != 0 && !sqe.IsFabrics() {
		e.SetNSID(sqe.NSID())
		switch sqe.Opcode() {
		case nvmeof.NVMRead, nvmeof.NVMWrite, nvmeof.NVMWriteZeroes:
			e.SetLBA(sqe.RWCmd().SLBA())
		}
	}
	c.mu.Unlock()
	return st | nvmeof.StatusMore
}

// errorLog writes the Error Information log page, newest entry first
// (nvmet_execute_get_log_page_error).
func (c *controller) errorLog(page []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot := c.errCount % errorLogSlots
	for i := 0; i < errorLogSlots; i++ {
		copy(page[i*nvmeof.ErrorLogEntrySize:], c.errLog[slot][:])
		if slot == 0 {
			slot = errorLogSlots - 1
		} else {
			slot--
		}
	}
}

// errorCount is the number of errors logged over the controller's life.
func (c *controller) errorCount() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errCount
}

// ioCounters sums the counters of the controller's queues, live and closed.
func (c *controller) ioCounters() IOCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := c.retired
	for _, q := range c.queues {
		if q != nil {
			sum.add(q.counters())
		}
	}
	return sum
}

func (a *IOCounters) add(b IOCounters) {
	a.ReadCommands += b.ReadCommands
	a.WriteCommands += b.WriteCommands
	a.OtherCommands += b.OtherCommands
	a.ReadBytes += b.ReadBytes
	a.WriteBytes += b.WriteBytes
	a.Errors += b.Errors
}
