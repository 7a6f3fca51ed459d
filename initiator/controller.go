package initiator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// State is the state of a host controller (Linux enum nvme_ctrl_state).
type State int32

// Controller states.
const (
	// StateNew: the first association is being opened.
	StateNew State = iota
	// StateLive: the association is open; I/O flows.
	StateLive
	// StateResetting: error recovery is tearing the queues down.
	StateResetting
	// StateConnecting: reconnect attempts are under way; I/O waits.
	StateConnecting
	// StateDeleting: Close is shutting the controller down.
	StateDeleting
	// StateDead: the controller is closed or was given up.
	StateDead
)

// String names the state as Linux's sysfs "state" attribute does.
func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateLive:
		return "live"
	case StateResetting:
		return "resetting"
	case StateConnecting:
		return "connecting"
	case StateDeleting:
		return "deleting"
	case StateDead:
		return "dead"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// association is one connected instance of the controller: the admin and
// I/O queues and what the controller said about itself. Error recovery
// replaces it with a new one.
type association struct {
	gen    uint64
	admin  hostQueue
	io     []hostQueue
	cntlid uint16
	cap    nvmeof.CAP
	vs     nvmeof.VS
	id     *nvmeof.IdentifyController

	maxXfer   int // bytes of data in one command
	inline    int // in-capsule data size on I/O queues (0: none)
	queueSize int // I/O queue size (sqsize+1)

	ctx    context.Context // ends when the association is torn down
	cancel context.CancelFunc
	wg     sync.WaitGroup
	aer    *nvmeof.HostRequest
	aenCh  chan nvmeof.AEN
}

// failure is a request for error recovery from association gen.
type failure struct {
	gen uint64
	err error
}

// Controller is a host controller: an association with an NVMe-oF
// controller over NVMe/RDMA, kept alive and reconnected, and the
// namespaces it exposes. Its methods are safe for concurrent use.
type Controller struct {
	cfg   Config
	log   *zap.Logger
	epoch time.Time

	ioq  []*ioQueue // ioq[i] is QID i+1
	free chan *cmd  // command slots of every I/O queue, interleaved

	gen       atomic.Uint64 // association generation
	authTID   atomic.Uint32 // DH-HMAC-CHAP transaction IDs (auth.go)
	nLive     atomic.Int32  // I/O queues of the live association
	maxXfer   atomic.Int64
	rr        atomic.Uint32
	compSeen  atomic.Bool // a command completed since the last keep-alive tick (TBKAS)
	failMu    perfcount.Mutex
	failed    failure       // the first failure of the newest association that reported one
	recoverCh chan struct{} // (buffer 1) a failure was reported
	closeReq  chan struct{}
	closeOnce sync.Once
	runDone   chan struct{}
	deadCh    chan struct{}
	baseCtx   context.Context // canceled when Close is done
	baseStop  context.CancelFunc
	reconnCtx context.Context // canceled when Close starts: ends reconnect attempts
	reconnStp context.CancelFunc
	closing   atomic.Bool // Close has started: new I/O is refused
	live      atomic.Bool // state is StateLive (read by multipath path selection)
	closeErr  error

	evMu   perfcount.Mutex
	events []Event
	evWake chan struct{}
	evDone chan struct{}

	scanMu perfcount.Mutex // one namespace scan at a time

	mu         perfcount.Mutex
	state      State
	assoc      *association
	deadErr    error
	namespaces map[uint32]*Namespace
	reconnects int
}

// Connect opens an association with the controller cfg names and returns
// the live host controller. The first association is not retried: an
// error here is the reason the controller could not be reached (a
// *rdma.CMRejectError, a *ConnectError, a dial error, ...). Reconnection
// applies to connections lost later.
func Connect(ctx context.Context, cfg Config) (*Controller, error) {
	d, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:        d,
		log:        d.Logger.With(zap.String("traddr", d.Address), zap.String("subnqn", d.SubNQN)),
		epoch:      time.Now(),
		recoverCh:  make(chan struct{}, 1),
		closeReq:   make(chan struct{}),
		runDone:    make(chan struct{}),
		deadCh:     make(chan struct{}),
		evWake:     make(chan struct{}, 1),
		evDone:     make(chan struct{}),
		namespaces: make(map[uint32]*Namespace),
	}
	c.baseCtx, c.baseStop = context.WithCancel(context.Background())
	c.reconnCtx, c.reconnStp = context.WithCancel(c.baseCtx)
	actx, cancel := context.WithTimeout(ctx, d.ConnectTimeout)
	a, err := c.associate(actx)
	cancel()
	if err != nil {
		c.baseStop()
		return nil, err
	}
	if !d.Discovery() && a.id.SUBNQN() != d.SubNQN {
		// nvmf_create_ctrl: "controller returned incorrect NQN".
		c.shutdownAssociation(context.Background(), a)
		c.baseStop()
		return nil, fmt.Errorf("initiator: controller returned incorrect NQN %q (asked for %q)", a.id.SUBNQN(), d.SubNQN)
	}
	c.makeQueues(len(a.io), a.queueSize)
	go c.eventLoop()
	c.install(a)
	if !d.Discovery() {
		if err := c.Rescan(ctx); err != nil {
			c.log.Warn("namespace scan", zap.Error(err))
		}
	}
	go c.run()
	return c, nil
}

// makeQueues creates the I/O queue objects and their command slots. They
// live as long as the controller; reconnects give them new connections.
func (c *Controller) makeQueues(n, size int) {
	c.ioq = make([]*ioQueue, n)
	slots := size - 1
	c.free = make(chan *cmd, n*slots)
	for i := range c.ioq {
		q := &ioQueue{c: c, qid: uint16(i + 1)}
		q.cmds = make([]cmd, slots)
		q.pending = make([]*cmd, 0, slots)
		for j := range q.cmds {
			m := &q.cmds[j]
			m.owner = q
			m.slot = j
			m.hr.Done = m.done
		}
		c.ioq[i] = q
	}
	for j := 0; j < slots; j++ { // interleave the queues
		for _, q := range c.ioq {
			c.free <- &q.cmds[j]
		}
	}
}

func (c *Controller) now() int64 { return int64(time.Since(c.epoch)) }

// State returns the controller's state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Config returns the controller's configuration, with defaults applied.
func (c *Controller) Config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// CNTLID returns the controller ID of the current association.
func (c *Controller) CNTLID() uint16 { return c.current().cntlid }

// CAP returns the Controller Capabilities property.
func (c *Controller) CAP() nvmeof.CAP { return c.current().cap }

// VS returns the controller's version.
func (c *Controller) VS() nvmeof.VS { return c.current().vs }

// IdentifyController returns a copy of the controller's Identify
// Controller data.
func (c *Controller) IdentifyController() *nvmeof.IdentifyController {
	id := *c.current().id
	return &id
}

// QueueCount returns the number of connected I/O queues and their size.
func (c *Controller) QueueCount() (n, size int) {
	a := c.current()
	return len(a.io), a.queueSize
}

// MaxTransferSize returns the largest data transfer of one command.
func (c *Controller) MaxTransferSize() int { return int(c.maxXfer.Load()) }

// InlineDataSize returns the in-capsule data size used for writes.
func (c *Controller) InlineDataSize() int { return c.current().inline }

// Reconnects returns how many times the association was opened again.
func (c *Controller) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnects
}

// Done is closed when the controller is dead: closed, or given up after
// a lost connection (Err says which).
func (c *Controller) Done() <-chan struct{} { return c.deadCh }

// Err returns why the controller is dead (nil while it is not, and after a
// clean Close).
func (c *Controller) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.deadErr, ErrControllerClosed) {
		return nil
	}
	return c.deadErr
}

// LocalAddr returns the local address of the admin queue's connection.
func (c *Controller) LocalAddr() string {
	if a := c.current(); a != nil && a.admin != nil {
		return a.admin.LocalAddr().String()
	}
	return ""
}

func (c *Controller) current() *association {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assoc
}

// associate opens one association (protocol.md §11.2 steps 1–8).
func (c *Controller) associate(ctx context.Context) (_ *association, err error) {
	cfg := &c.cfg
	a := &association{gen: c.gen.Load() + 1}
	a.ctx, a.cancel = context.WithCancel(c.baseCtx)
	pd := rdma.NewPD() // one protection domain per association
	defer func() {
		if err != nil {
			a.cancel()
			abortQueues(a, err)
			a.wg.Wait()
		}
	}()
	a.admin, err = c.dialQueue(ctx, 0, nvmeof.AdminQueueDepth, 0, pd)
	if err != nil {
		return nil, fmt.Errorf("initiator: admin queue to %s: %w", cfg.Address, err)
	}
	kato := uint32(cfg.KeepAliveTimeout / time.Millisecond)
	a.cntlid, err = c.fabricsConnect(ctx, a.admin, 0, nvmeof.AdminMaxSQSize, kato, nvmeof.CNTLIDDynamic)
	if err != nil {
		return nil, err
	}
	if err = c.enable(ctx, a); err != nil {
		return nil, err
	}
	buf := make([]byte, nvmeof.IdentifyDataSize)
	if err = c.adminDo(ctx, a, "Identify Controller", buf, false, func(s *nvmeof.SQE) {
		s.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
	}, nil); err != nil {
		return nil, err
	}
	a.id, _ = nvmeof.ParseIdentifyController(buf)
	if err = a.id.CheckFabricsTransport(a.cntlid, cfg.Discovery(), cfg.TrType); err != nil {
		return nil, fmt.Errorf("initiator: %w", err)
	}
	a.maxXfer = cfg.MaxTransferSize
	if m := a.id.MaxTransferSize(); m > 0 && m < a.maxXfer {
		a.maxXfer = m
	}
	if cfg.Discovery() {
		return a, nil
	}
	// Keep alive runs from here on (protocol.md §11.2 step 6): setting up
	// many I/O queues on a slow link must not outlast the controller's KATO.
	if cfg.KeepAliveTimeout > 0 {
		a.wg.Add(1)
		go c.keepAlive(a)
	}
	// nvme_rdma_setup_ctrl: the queue size is clamped to CAP.MQES+1,
	// NVME_RDMA_MAX_QUEUE_SIZE and MAXCMD.
	a.queueSize = cfg.QueueSize
	if m := int(a.cap.MQES()) + 1; a.queueSize > m {
		c.log.Warn("queue_size > ctrl sqsize, clamping down", zap.Int("queue_size", a.queueSize), zap.Int("mqes+1", m))
		a.queueSize = m
	}
	if m := c.maxQueueSize(); a.queueSize > m {
		a.queueSize = m
	}
	if m := int(a.id.MAXCMD()); m > 0 && a.queueSize > m {
		c.log.Warn("sqsize > ctrl maxcmd, clamping down", zap.Int("queue_size", a.queueSize), zap.Int("maxcmd", m))
		a.queueSize = m
	}
	if a.queueSize < 2 {
		return nil, fmt.Errorf("initiator: controller allows an I/O queue of %d entries", a.queueSize)
	}
	// In-capsule data: SGLS bit 20, IOCCSZ*16-64 bytes, and as nvme-rdma
	// at most NVME_RDMA_MAX_INLINE_SEGMENTS (4) pages.
	a.inline = c.inlineDataSize(a.id)
	// Set Features Number of Queues (nvme_set_queue_count): an NVMe error
	// leaves the controller without I/O queues, a transport error fails.
	n := cfg.NrIOQueues
	if c.ioq != nil {
		n = len(c.ioq) // a reconnect asks for what the first association got
	}
	var cqe nvmeof.CQE
	err = c.adminDo(ctx, a, "Set Features (Number of Queues)", nil, false, func(s *nvmeof.SQE) {
		s.BuildSetFeatures(nvmeof.FeatNumQueues, 0, nvmeof.EncodeNumQueues(n, n), false)
	}, &cqe)
	var st nvmeof.Status
	switch {
	case errors.As(err, &st):
		c.log.Warn("could not set queue count", zap.Error(err))
		n = 0
	case err != nil:
		return nil, err
	default:
		nsq, ncq := nvmeof.DecodeNumQueues(cqe.Result())
		n = min(n, nsq, ncq)
	}
	// One TCP connection per I/O queue, each with its Fabrics Connect
	// (nvme_rdma_start_io_queues).
	for qid := 1; qid <= n; qid++ {
		hq, err := c.dialQueue(ctx, uint16(qid), a.queueSize, a.inline, pd)
		if err != nil {
			return nil, fmt.Errorf("initiator: I/O queue %d to %s: %w", qid, cfg.Address, err)
		}
		a.io = append(a.io, hq)
		if _, err := c.fabricsConnect(ctx, hq, uint16(qid), uint16(a.queueSize-1), 0, a.cntlid); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// abortQueues closes every queue of a at once and waits until their
// outstanding commands have been completed with errors.
func abortQueues(a *association, cause error) {
	if cause == nil {
		cause = errors.New("association torn down")
	}
	for _, hq := range a.io {
		hq.Abort(cause)
	}
	if a.admin != nil {
		a.admin.Abort(cause)
	}
	for _, hq := range a.io {
		<-hq.Done()
	}
	if a.admin != nil {
		<-a.admin.Done()
	}
}

// fabricsConnect sends the Fabrics Connect for queue qid (protocol.md §9.1)
// and returns the controller ID.
func (c *Controller) fabricsConnect(ctx context.Context, hq hostQueue, qid, sqsize uint16, kato uint32, cntlid uint16) (uint16, error) {
	data := make([]byte, nvmeof.ConnectDataSize)
	cd := (*nvmeof.ConnectData)(data)
	cd.SetHostID(c.cfg.HostID)
	cd.SetCNTLID(cntlid)
	cd.SetSubNQN(c.cfg.SubNQN)
	cd.SetHostNQN(c.cfg.HostNQN)
	r := &nvmeof.HostRequest{Data: data, Write: true}
	r.SQE.BuildConnect(qid, sqsize, kato)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AdminTimeout)
	defer cancel()
	defer nudge(hq)()
	err := hq.Do(ctx, r)
	var st nvmeof.Status
	if errors.As(err, &st) && r.Err == nil {
		return 0, &ConnectError{QID: qid, SubNQN: c.cfg.SubNQN, HostNQN: c.cfg.HostNQN, CNTLID: cntlid, Status: st, Result: r.CQE.Result()}
	}
	if err != nil {
		return 0, fmt.Errorf("initiator: connect (qid %d): %w", qid, err)
	}
	resp := nvmeof.ConnectResponse(r.CQE.Result())
	if resp.ASCR() {
		// Secure channel concatenation (TLS) does not exist on NVMe/RDMA,
		// and this host has no NVMe/TCP TLS (TP 8011).
		return 0, fmt.Errorf("initiator: connect (qid %d): the controller requires secure channel concatenation (TLS), which this host does not support", qid)
	}
	if c.needsAuth(resp) {
		if err := c.authenticate(ctx, hq, qid); err != nil {
			return 0, err
		}
	}
	if qid != 0 && resp.CNTLID() != cntlid && resp.CNTLID() != 0 {
		c.log.Warn("I/O queue connect returned another cntlid", zap.Uint16("qid", qid), zap.Uint16("cntlid", resp.CNTLID()))
	}
	return resp.CNTLID(), nil
}

// nudgeAt is when a queue's first command (its Connect) is nudged if it
// has not completed: see rdma.HostQueue.Nudge for the Linux siw lost
// wake-up this gets past.
var nudgeAt = []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}

// nudge sends zero-length RDMA Writes on hq at nudgeAt until the returned
// function is called (when the Connect has completed).
func nudge(q hostQueue) (stop func()) {
	hq, ok := q.(*rdma.HostQueue)
	if !ok {
		return func() {} // NVMe/TCP has no such lost wake-up to get past
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		start := time.Now()
		for _, at := range nudgeAt {
			t := time.NewTimer(at - time.Since(start))
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			if hq.Nudge() != nil {
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// adminDo runs one admin command on a's admin queue, bounded by
// AdminTimeout (a timeout tears the queue down, which starts recovery).
// If res is not nil it receives the completion.
func (c *Controller) adminDo(ctx context.Context, a *association, name string, data []byte, write bool, build func(*nvmeof.SQE), res *nvmeof.CQE) error {
	r := &nvmeof.HostRequest{Data: data, Write: write}
	build(&r.SQE)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AdminTimeout)
	defer cancel()
	err := a.admin.Do(ctx, r)
	if res != nil {
		*res = r.CQE
	}
	if err != nil {
		return &CommandError{Command: name, Err: err}
	}
	return nil
}

func (c *Controller) propertyGet(ctx context.Context, a *association, off uint32) (uint64, error) {
	var cqe nvmeof.CQE
	err := c.adminDo(ctx, a, fmt.Sprintf("Property Get %#x", off), nil, false, func(s *nvmeof.SQE) { s.BuildPropertyGet(off) }, &cqe)
	if nvmeof.PropertySize(off) == 8 {
		return cqe.Result64(), err
	}
	return uint64(cqe.Result()), err
}

func (c *Controller) propertySet(ctx context.Context, a *association, off uint32, v uint64) error {
	return c.adminDo(ctx, a, fmt.Sprintf("Property Set %#x", off), nil, false, func(s *nvmeof.SQE) { s.BuildPropertySet(off, v) }, nil)
}

// enable runs nvme_enable_ctrl and reads VS (protocol.md §9.2).
func (c *Controller) enable(ctx context.Context, a *association) error {
	v, err := c.propertyGet(ctx, a, nvmeof.PropCAP)
	if err != nil {
		return err
	}
	a.cap = nvmeof.CAP(v)
	if a.cap.MPSMIN() > 0 {
		return fmt.Errorf("initiator: minimum device page size %d too large for host (4096)", 4096<<a.cap.MPSMIN())
	}
	var cc nvmeof.CC
	if a.cap.CSS()&nvmeof.CAPCSSCSI != 0 {
		cc.SetCSS(nvmeof.CCCSSCSI)
	} else {
		cc.SetCSS(nvmeof.CCCSSNVM)
	}
	if a.cap.CRMS()&nvmeof.CRMSCRWMS != 0 && a.cap.CRMS()&nvmeof.CRMSCRIMS != 0 {
		cc.SetCRIME(true)
	}
	cc.SetMPS(0)
	cc.SetAMS(nvmeof.CCAMSRR)
	cc.SetSHN(nvmeof.CCSHNNone)
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	if err := c.propertySet(ctx, a, nvmeof.PropCC, uint64(cc)); err != nil {
		return err
	}
	// "CAP value may change after initial CC write".
	if v, err = c.propertyGet(ctx, a, nvmeof.PropCAP); err != nil {
		return err
	}
	a.cap = nvmeof.CAP(v)
	timeout := uint32(a.cap.TO())
	if a.cap.CRMS()&nvmeof.CRMSCRWMS != 0 {
		v, err := c.propertyGet(ctx, a, nvmeof.PropCRTO)
		if err != nil {
			return err
		}
		crto := nvmeof.CRTO(v)
		ready := uint32(crto.CRWMT())
		if cc.CRIME() {
			ready = uint32(crto.CRIMT())
		}
		if ready >= timeout {
			timeout = ready
		}
	}
	cc.SetEN(true)
	if err := c.propertySet(ctx, a, nvmeof.PropCC, uint64(cc)); err != nil {
		return err
	}
	// nvme_wait_ready: (timeout+1)/2 seconds, polling every 1–2 ms.
	limit := time.Duration(timeout+1) * 500 * time.Millisecond
	if err := c.waitCSTS(ctx, a, limit, "initialisation", func(s nvmeof.CSTS) bool { return s.RDY() }); err != nil {
		return err
	}
	if v, err = c.propertyGet(ctx, a, nvmeof.PropVS); err != nil {
		return err
	}
	a.vs = nvmeof.VS(v)
	return nil
}

// waitCSTS polls CSTS until ok is true, CSTS.CFS is set, or limit passes.
func (c *Controller) waitCSTS(ctx context.Context, a *association, limit time.Duration, what string, ok func(nvmeof.CSTS) bool) error {
	deadline := time.Now().Add(limit)
	for {
		v, err := c.propertyGet(ctx, a, nvmeof.PropCSTS)
		if err != nil {
			return err
		}
		csts := nvmeof.CSTS(v)
		if ok(csts) {
			return nil
		}
		if csts.CFS() {
			return fmt.Errorf("%w: controller fatal status during %s (CSTS %v)", ErrNotReady, what, csts)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: device not ready after %v; aborting %s (CSTS %v)", ErrNotReady, limit, what, csts)
		}
		t := time.NewTimer(time.Millisecond + time.Millisecond/2)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// install makes a the live association: the I/O queues get their
// connections, keep alive and the watchers start, and commands kept from a
// lost association are sent again.
func (c *Controller) install(a *association) {
	c.mu.Lock()
	c.assoc = a
	c.gen.Store(a.gen)
	c.maxXfer.Store(int64(a.maxXfer))
	for i, q := range c.ioq {
		q.mu.Lock()
		q.hq = nil
		if i < len(a.io) {
			q.hq = a.io[i]
			q.gen = a.gen
		}
		q.mu.Unlock()
	}
	c.nLive.Store(int32(len(a.io)))
	c.state = StateLive
	c.live.Store(true)
	c.mu.Unlock()

	// Watch every queue: a connection that ends starts recovery.
	for _, hq := range append([]hostQueue{a.admin}, a.io...) {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			select {
			case <-hq.Done():
				err := hq.Err()
				if err == nil {
					err = nvmeof.ErrQueueClosed
				}
				c.queueFailed(a.gen, fmt.Errorf("qid %d: %w", hq.QID(), err))
			case <-a.ctx.Done():
			}
		}()
	}
	if c.cfg.KeepAliveTimeout > 0 && c.cfg.Discovery() {
		a.wg.Add(1)
		go c.keepAlive(a) // (I/O controllers: started by associate)
	}
	if len(a.io) > 0 {
		a.wg.Add(1)
		go c.watchTimeouts(a)
	}
	c.startAER(a)
	c.resubmitPending()
}

// queueFailed asks for error recovery of association gen. The first
// failure of an association is its cause; it is kept until recovery (or
// Close) reads it, and a failure of an older association never hides it.
func (c *Controller) queueFailed(gen uint64, err error) {
	if gen != c.gen.Load() {
		return
	}
	c.failMu.Lock()
	if gen > c.failed.gen {
		c.failed = failure{gen, err}
	}
	c.failMu.Unlock()
	select {
	case c.recoverCh <- struct{}{}:
	default: // a wake-up is pending: it reads c.failed after this
	}
}

// lastFailure returns the failure of the newest association that reported
// one.
func (c *Controller) lastFailure() failure {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	return c.failed
}

// run waits for failures of the live association and recovers from them
// until the controller is closed or given up.
func (c *Controller) run() {
	defer close(c.runDone)
	for {
		select {
		case <-c.recoverCh:
			f := c.lastFailure()
			if f.gen != c.gen.Load() || c.State() != StateLive {
				continue
			}
			if !c.recoverFrom(f.err) {
				return
			}
		case <-c.closeReq:
			return
		}
	}
}

// recoverFrom is nvme_rdma_error_recovery_work followed by the reconnect
// work: tear down, then reconnect every ReconnectDelay while
// nvmf_should_reconnect allows it. It reports whether the controller is
// live again.
func (c *Controller) recoverFrom(cause error) bool {
	c.mu.Lock()
	c.state = StateResetting
	c.live.Store(false)
	a := c.assoc
	c.mu.Unlock()
	c.log.Warn("starting error recovery", zap.Error(cause))
	c.emit(Event{Kind: EventReconnecting, Err: cause})
	c.teardown(a, cause)
	c.mu.Lock()
	c.state = StateConnecting
	c.mu.Unlock()

	var last error = cause
	res := reconnectLoop(c.cfg.ReconnectDelay, c.cfg.maxReconnects(), c.closeReq, func(attempt int) (bool, bool) {
		ctx, cancel := context.WithTimeout(c.reconnCtx, c.cfg.ConnectTimeout)
		na, err := c.associate(ctx)
		cancel()
		if err == nil && na.id.SUBNQN() != c.cfg.SubNQN && !c.cfg.Discovery() {
			err = fmt.Errorf("initiator: controller returned incorrect NQN %q", na.id.SUBNQN())
			na.cancel()
			abortQueues(na, err)
		}
		if err == nil {
			c.mu.Lock()
			c.reconnects++
			c.mu.Unlock()
			c.log.Info("successfully reconnected", zap.Int("attempt", attempt), zap.Uint16("cntlid", na.cntlid))
			c.install(na)
			c.emit(Event{Kind: EventReconnected, Attempt: attempt})
			if !c.cfg.Discovery() {
				na.wg.Add(1)
				go func() {
					defer na.wg.Done()
					if err := c.Rescan(na.ctx); err != nil && na.ctx.Err() == nil {
						c.log.Warn("namespace scan after reconnect", zap.Error(err))
					}
				}()
			}
			return true, false
		}
		last = err
		c.log.Warn("failed reconnect attempt", zap.Int("attempt", attempt), zap.Error(err))
		c.emit(Event{Kind: EventReconnectFailed, Err: err, Attempt: attempt})
		// nvmf_should_reconnect: a status with DNR ends the attempts.
		var st nvmeof.Status
		return false, errors.As(err, &st) && st.DNR()
	})
	switch res {
	case reconnected:
		return true
	case givenUp:
		c.lose(last)
	}
	return false
}

// Outcomes of reconnectLoop.
const (
	reconnected = iota
	givenUp
	stopped
)

// reconnectLoop is the schedule of nvme_rdma_reconnect_or_remove and
// nvmf_should_reconnect: attempt n runs n×delay after the loss, as long as
// n ≤ max (max < 0: no limit), until one succeeds (ok), one fails for good
// (giveUp), or stop is closed.
func reconnectLoop(delay time.Duration, max int, stop <-chan struct{}, attempt func(n int) (ok, giveUp bool)) int {
	for n := 1; ; n++ {
		if max >= 0 && n > max {
			return givenUp
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return stopped
		}
		ok, giveUp := attempt(n)
		switch {
		case ok:
			return reconnected
		case giveUp:
			return givenUp
		}
		select {
		case <-stop:
			return stopped
		default:
		}
	}
}

// teardown stops everything that runs for association a and closes its
// queues; commands still outstanding come back to the queues' pending lists.
func (c *Controller) teardown(a *association, cause error) {
	if a == nil {
		return
	}
	for _, q := range c.ioq {
		q.mu.Lock()
		q.hq = nil
		q.mu.Unlock()
	}
	a.cancel()
	abortQueues(a, cause)
	a.wg.Wait()
	c.failoverPending()
}

// lose gives the controller up: kept and new I/O fail.
func (c *Controller) lose(cause error) {
	err := fmt.Errorf("%w: %v", ErrControllerLost, cause)
	c.log.Error("removing controller", zap.Error(err))
	c.kill(err)
	c.emit(Event{Kind: EventLost, Err: err})
}

// kill makes the controller dead with err and fails every kept command.
func (c *Controller) kill(err error) {
	c.mu.Lock()
	if c.state == StateDead {
		c.mu.Unlock()
		return
	}
	c.state = StateDead
	c.live.Store(false)
	c.deadErr = err
	c.gen.Add(1) // stale failures are ignored from now on
	close(c.deadCh)
	c.mu.Unlock()
	for _, m := range c.takePending(err) {
		c.retire(m, err)
	}
}

// Close shuts the controller down in the order of nvme_rdma_delete_ctrl:
// new I/O is refused, I/O in flight drains, volatile write caches are
// flushed, the I/O queues are disconnected, CC.SHN is set and CSTS.SHST
// awaited (bounded by ShutdownTimeout), and the admin queue is
// disconnected. Close does not wait for I/O that cannot complete: if the
// association fails meanwhile (a lost connection, a command or keep-alive
// timeout) or ctx ends, the association is torn down at once and its I/O
// fails with ErrControllerClosed, as does the I/O kept by a controller that
// is reconnecting (nvme delete_ctrl during reconnect). Close returns the
// first error met; the controller is dead afterwards either way.
func (c *Controller) Close(ctx context.Context) error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closing.Store(true)
		close(c.closeReq)
		c.reconnStp()
		<-c.runDone
		c.mu.Lock()
		a := c.assoc
		live := c.state == StateLive
		if c.state != StateDead {
			c.state = StateDeleting
		}
		c.live.Store(false)
		c.mu.Unlock()
		var err error
		if live {
			err = c.shutdown(ctx, a)
		} else if a != nil {
			c.teardown(a, ErrControllerClosed)
		}
		c.kill(ErrControllerClosed)
		c.baseStop()
		close(c.evWake)
		<-c.evDone
		c.closeErr = err
	})
	if !first {
		<-c.evDone
	}
	return c.closeErr
}

// shutdown is the orderly part of Close for a live association.
func (c *Controller) shutdown(ctx context.Context, a *association) error {
	var errs []error
	lost, stopWatch := c.abandonOnFailure(ctx, a)
	// Drain: wait until every command slot is back.
drain:
	for len(c.free) < cap(c.free) {
		t := time.NewTimer(time.Millisecond)
		select {
		case <-lost:
			t.Stop()
			break drain
		case <-t.C:
		}
	}
	// Flush volatile write caches (what del_gendisk's final sync does).
	if len(a.io) > 0 && a.id.VWC()&nvmeof.VWCPresent != 0 {
		for _, ns := range c.Namespaces() {
			select {
			case <-lost:
				continue
			default:
			}
			if err := ns.flushClosing(ctx); err != nil {
				errs = append(errs, fmt.Errorf("initiator: close: flush namespace %d: %w", ns.NSID(), err))
			}
		}
	}
	if cause := stopWatch(); cause != nil {
		// a is gone and its I/O failed: nothing is left to shut down in
		// order.
		a.wg.Wait()
		return errors.Join(append(errs, fmt.Errorf("initiator: close: %w", cause))...)
	}
	c.mu.Lock()
	c.gen.Add(1) // the queues closing below are not failures
	c.mu.Unlock()
	for _, q := range c.ioq {
		q.mu.Lock()
		q.hq = nil
		q.mu.Unlock()
	}
	a.cancel()
	// nvme_rdma_teardown_io_queues, then nvme_disable_ctrl(shutdown).
	for _, hq := range a.io {
		hq.Close()
	}
	if err := c.shutdownController(ctx, a); err != nil {
		errs = append(errs, err)
	}
	a.admin.Close()
	a.wg.Wait()
	return errors.Join(errs...)
}

// abandonOnFailure stands in for error recovery, which has stopped, while
// Close waits for the I/O of association a: a failure of a (a lost
// connection, a command or keep-alive timeout) or the end of ctx tears a
// down at once and fails the I/O it holds with ErrControllerClosed, rather
// than keeping it for a reconnect that will not come (a DELETING controller
// is not reset by nvme_rdma_error_recovery, and nvme_rdma_timeout completes
// a timed-out request at once when the controller is not LIVE). lost is
// closed once a is torn down; stop ends the watch and returns why a was
// abandoned (nil if it was not).
func (c *Controller) abandonOnFailure(ctx context.Context, a *association) (lost <-chan struct{}, stop func() error) {
	lostCh, quit, exited := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var cause error
	go func() {
		defer close(exited)
		for cause == nil {
			if f := c.lastFailure(); f.gen == a.gen {
				cause = fmt.Errorf("association lost: %w", f.err)
				break
			}
			select {
			case <-c.recoverCh:
			case <-ctx.Done():
				cause = fmt.Errorf("I/O did not complete: %w", ctx.Err())
			case <-quit:
				return
			}
		}
		c.log.Warn("closing: giving the association up, failing its I/O", zap.Error(cause))
		err := fmt.Errorf("%w: %w", ErrControllerClosed, cause)
		for _, m := range c.takePending(err) {
			c.retire(m, err)
		}
		a.cancel()
		abortQueues(a, cause) // outstanding commands fail through keep
		close(lostCh)
	}()
	return lostCh, func() error {
		close(quit)
		<-exited
		return cause
	}
}

// shutdownController sets CC.SHN to normal shutdown and waits for
// CSTS.SHST complete within ShutdownTimeout (nvme_disable_ctrl with
// shutdown; on timeout Linux logs and goes on).
func (c *Controller) shutdownController(ctx context.Context, a *association) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ShutdownTimeout+time.Second)
	defer cancel()
	v, err := c.propertyGet(ctx, a, nvmeof.PropCC)
	if err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	cc := nvmeof.CC(v)
	cc.SetSHN(nvmeof.CCSHNNormal)
	if err := c.propertySet(ctx, a, nvmeof.PropCC, uint64(cc)); err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	err = c.waitCSTS(ctx, a, c.cfg.ShutdownTimeout, "shutdown", func(s nvmeof.CSTS) bool { return s.SHST() == nvmeof.SHSTComplete })
	if err != nil {
		c.log.Warn("shutdown timeout", zap.Error(err))
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	return nil
}

// shutdownAssociation closes a that never became live.
func (c *Controller) shutdownAssociation(ctx context.Context, a *association) {
	a.cancel()
	for _, hq := range a.io {
		hq.Close()
	}
	_ = c.shutdownController(ctx, a)
	a.admin.Close()
	a.wg.Wait()
}

// keepAlive sends a Keep Alive every KATO/2 (KATO/4 with traffic based
// keep alive, skipped when commands completed meanwhile), each bounded by
// KATO as nvme_keep_alive_work does; a failure starts error recovery.
func (c *Controller) keepAlive(a *association) {
	defer a.wg.Done()
	kato := c.cfg.KeepAliveTimeout
	tbkas := a.id.CTRATT()&nvmeof.CTRATTTBKAS != 0
	period := kato / 2
	if tbkas {
		period = kato / 4
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if tbkas && c.compSeen.Swap(false) {
			continue
		}
		// The Keep Alive's own timeout is KATO (rq->timeout = kato * HZ):
		// on expiry recovery starts with ErrKeepAlive as the cause, then
		// the admin queue is torn down.
		done := make(chan struct{})
		r := &nvmeof.HostRequest{Done: func(*nvmeof.HostRequest) { close(done) }}
		r.SQE.BuildKeepAlive()
		if err := a.admin.Submit(r); err != nil {
			if a.ctx.Err() == nil {
				c.queueFailed(a.gen, fmt.Errorf("%w: %v", ErrKeepAlive, err))
			}
			return
		}
		kt := time.NewTimer(kato)
		var err error
		select {
		case <-done:
			kt.Stop()
			err = r.Status()
		case <-kt.C:
			err = fmt.Errorf("no completion within KATO %v", kato)
		case <-a.ctx.Done():
			kt.Stop()
			return
		}
		if err != nil {
			if a.ctx.Err() != nil {
				return
			}
			err = fmt.Errorf("%w: %v", ErrKeepAlive, err)
			c.log.Warn("keep alive failed", zap.Error(err))
			c.queueFailed(a.gen, err)
			a.admin.Abort(err)
			return
		}
	}
}

// watchTimeouts starts error recovery when an I/O command has been
// outstanding longer than IOTimeout (nvme_rdma_timeout).
func (c *Controller) watchTimeouts(a *association) {
	defer a.wg.Done()
	period := min(c.cfg.IOTimeout/4, time.Second)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		now := c.now()
		for _, q := range c.ioq {
			for i := range q.cmds {
				m := &q.cmds[i]
				if d := m.deadline.Load(); d != 0 && now > d && m.gen.Load() == a.gen {
					// m.hr is its owner's (it may complete meanwhile):
					// the opcode comes from what send recorded.
					var sqe nvmeof.SQE
					sqe.SetOpcode(uint8(m.opcode.Load()))
					op := nvmeof.OpcodeName(1, &sqe)
					c.log.Warn("I/O timeout", zap.Uint16("qid", q.qid), zap.String("opcode", op))
					c.queueFailed(a.gen, fmt.Errorf("%w: %s on qid %d after %v", ErrCommandTimeout, op, q.qid, c.cfg.IOTimeout))
					return
				}
			}
		}
	}
}

// emit queues an event for OnEvent.
func (c *Controller) emit(e Event) {
	if c.cfg.OnEvent == nil {
		return
	}
	c.evMu.Lock()
	c.events = append(c.events, e)
	c.evMu.Unlock()
	select {
	case c.evWake <- struct{}{}:
	default:
	}
}

func (c *Controller) eventLoop() {
	defer close(c.evDone)
	for {
		_, ok := <-c.evWake
		c.evMu.Lock()
		evs := c.events
		c.events = nil
		c.evMu.Unlock()
		for _, e := range evs {
			c.cfg.OnEvent(e)
		}
		if !ok {
			return
		}
	}
}

// Namespaces returns the active namespaces, by NSID.
func (c *Controller) Namespaces() []*Namespace {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Namespace, 0, len(c.namespaces))
	for _, ns := range c.namespaces {
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].nsid < out[j].nsid })
	return out
}

// Namespace returns the active namespace nsid, or nil.
func (c *Controller) Namespace(nsid uint32) *Namespace {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.namespaces[nsid]
}

// AdminCommand sends an admin command (like nvme admin-passthru): sqe is
// sent as is (its CID and SGL are set by the transport), data is the
// command's data buffer, write its direction. It returns the completion
// and the command's status as an error.
func (c *Controller) AdminCommand(ctx context.Context, sqe *nvmeof.SQE, data []byte, write bool) (nvmeof.CQE, error) {
	a, err := c.liveAssociation()
	if err != nil {
		return nvmeof.CQE{}, err
	}
	var cqe nvmeof.CQE
	err = c.adminDo(ctx, a, nvmeof.OpcodeName(0, sqe), data, write, func(s *nvmeof.SQE) { *s = *sqe }, &cqe)
	return cqe, err
}

// GetLogPage reads len(buf) bytes of log page lid at byte offset lpo
// (NSID nsid, Retain Asynchronous Event rae) in one command.
func (c *Controller) GetLogPage(ctx context.Context, lid uint8, nsid uint32, lpo uint64, rae bool, buf []byte) error {
	var sqe nvmeof.SQE
	sqe.BuildGetLogPage(lid, nsid, lpo, uint32(len(buf))).SetRAE(rae)
	_, err := c.AdminCommand(ctx, &sqe, buf, false)
	return err
}

func (c *Controller) liveAssociation() (*association, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case StateLive:
		return c.assoc, nil
	case StateDead:
		return nil, c.deadErr
	case StateDeleting:
		return nil, ErrControllerClosed
	}
	return nil, fmt.Errorf("initiator: controller is %v", c.state)
}

// QueueStats returns the counters of the connected I/O queues.
func (c *Controller) QueueStats() []rdma.HostStats {
	a := c.current()
	out := make([]rdma.HostStats, 0, len(a.io))
	for _, hq := range a.io {
		out = append(out, queueStats(hq))
	}
	return out
}

// CRC reports whether the admin queue's connection uses MPA CRCs (as
// negotiated: either side may have asked for them).
func (c *Controller) CRC() bool {
	if a := c.current(); a != nil && a.admin != nil {
		if hq, ok := a.admin.(*rdma.HostQueue); ok {
			return hq.CRC()
		}
	}
	return false
}
