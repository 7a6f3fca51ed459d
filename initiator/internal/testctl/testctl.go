// Package testctl is a small NVMe-oF controller on nvmeof/rdma's controller
// side, for the initiator's tests: one NVM subsystem and the discovery
// subsystem on one port, namespaces in memory or in files, the admin
// commands a Linux host (and the initiator) sends, Read/Write/Flush/Write
// Zeroes/Dataset Management, asynchronous events, keep-alive expiry, and hooks
// to misbehave. It is not the target (package target is nvmetd's); it
// follows nvmet where behaviour matters to a host.
package testctl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// NamespaceConfig describes one namespace.
type NamespaceConfig struct {
	NSID      uint32
	Size      int64  // bytes
	BlockSize int    // default 512
	Path      string // a file to keep the data in (created); "" keeps it in memory
}

// Action is what Intercept decides for a command.
type Action uint8

// Actions.
const (
	// Proceed handles the command normally.
	Proceed Action = iota
	// Fail completes the command with the returned status.
	Fail
	// Hold never completes the command (until its queue closes).
	Hold
	// CloseQueue closes the command's queue without answering.
	CloseQueue
)

// Config configures a test controller.
type Config struct {
	// Addr is the listening address (default "127.0.0.1:0").
	Addr string
	// SubNQN is the NVM subsystem's NQN.
	SubNQN string
	// Namespaces are the subsystem's namespaces.
	Namespaces []NamespaceConfig
	// AllowedHosts lists host NQNs allowed to connect (empty: any).
	AllowedHosts []string
	// Transport is the NVMe/RDMA controller configuration (inline data
	// size, queue size, MDTS, MPA CRC).
	Transport rdma.ControllerConfig
	// MaxQueues is the I/O queue count granted (default 8).
	MaxQueues int
	// OAES is the Identify Controller OAES (default: namespace attribute
	// notices).
	OAES uint32
	// NoVWC clears Identify Controller VWC (no volatile write cache).
	NoVWC bool
	// IgnoreKATO disables the keep-alive timer (nvmet tears a controller
	// down when no command came within KATO).
	IgnoreKATO bool
	// Referrals are extra discovery log entries (referrals or other
	// subsystems).
	Referrals []nvmeof.DiscoveryEntry
	// Intercept, if set, sees every command first.
	Intercept func(qid uint16, sqe *nvmeof.SQE) (Action, nvmeof.Status)
	// Logger receives events.
	Logger *zap.Logger
}

// Target is a running test controller.
type Target struct {
	cfg Config
	ln  *rdma.Listener
	log *zap.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ns       map[uint32]*namespace
	ctrls    map[uint16]*ctrl
	queues   map[*rdma.ControllerQueue]bool
	qctrl    map[*rdma.ControllerQueue]*ctrl // a connected queue's controller
	held     []*rdma.Request
	nextCtrl uint16
	genctr   uint64
	paused   bool

	// counters of commands: [0] fabrics by FCTYPE, [1] admin, [2] I/O by
	// opcode; commands holds other counters.
	counts   [3][256]atomic.Int64
	cmdMu    sync.Mutex
	commands map[string]int
	// Connects counts admin connects.
	Connects atomic.Int64
}

type namespace struct {
	cfg  NamespaceConfig
	mu   sync.RWMutex
	mem  []byte
	file *os.File
	uuid [16]byte
}

type ctrl struct {
	t       *Target
	cntlid  uint16
	disc    bool
	hostnqn string
	kato    time.Duration

	mu       sync.Mutex
	cc       nvmeof.CC
	csts     nvmeof.CSTS
	aecMask  uint32
	aers     []*rdma.Request
	events   []nvmeof.AEN
	changed  []uint32
	nq       int
	queues   []*rdma.ControllerQueue
	lastKA   time.Time
	closed   bool
	kaCancel context.CancelFunc
}

// Start listens and serves.
func Start(cfg Config) (*Target, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.MaxQueues == 0 {
		cfg.MaxQueues = 8
	}
	if cfg.OAES == 0 {
		cfg.OAES = nvmeof.AECNSAttr
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Transport.Logger == nil {
		cfg.Transport.Logger = cfg.Logger
	}
	t := &Target{cfg: cfg, log: cfg.Logger, ns: map[uint32]*namespace{}, ctrls: map[uint16]*ctrl{},
		queues: map[*rdma.ControllerQueue]bool{}, qctrl: map[*rdma.ControllerQueue]*ctrl{}, nextCtrl: 1, genctr: 1, commands: map[string]int{}, done: make(chan struct{})}
	for _, nc := range cfg.Namespaces {
		if err := t.addNamespace(nc); err != nil {
			return nil, err
		}
	}
	tc := cfg.Transport
	tc.AdmitOnAccept = true // the test controller has no login phase
	ln, err := rdma.Listen("tcp", cfg.Addr, tc)
	if err != nil {
		return nil, err
	}
	t.ln = ln
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.acceptLoop(ctx)
	return t, nil
}

func (t *Target) acceptLoop(ctx context.Context) {
	defer close(t.done)
	for {
		req, err := t.ln.Accept(ctx)
		if err != nil {
			return
		}
		q, err := req.Accept(t)
		if err != nil {
			t.log.Info("queue not accepted", zap.Error(err))
			continue
		}
		t.mu.Lock()
		t.queues[q] = true
		t.mu.Unlock()
	}
}

// Addr is the listening address.
func (t *Target) Addr() string { return t.ln.Addr().String() }

// Close stops listening and closes every queue.
func (t *Target) Close() {
	t.cancel()
	t.ln.Close()
	<-t.done
	t.DropConnections()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ns := range t.ns {
		if ns.file != nil {
			ns.file.Close()
		}
	}
}

// DropConnections closes every queue (the host sees its connections end).
func (t *Target) DropConnections() {
	t.mu.Lock()
	qs := make([]*rdma.ControllerQueue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	held := t.held
	t.held = nil
	t.mu.Unlock()
	for _, r := range held {
		r.Complete(nvmeof.StatusAbortSQDeleted)
	}
	for _, q := range qs {
		q.Close()
	}
	for _, q := range qs {
		<-q.Done()
	}
}

// Pause makes the controller hold every command it receives from now on
// without answering (a silent peer); Resume answers again (held commands
// stay held until their queues close).
func (t *Target) Pause() {
	t.mu.Lock()
	t.paused = true
	t.mu.Unlock()
}

// Resume ends Pause.
func (t *Target) Resume() {
	t.mu.Lock()
	t.paused = false
	t.mu.Unlock()
}

// Controllers returns the number of live controllers.
func (t *Target) Controllers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ctrls)
}

// Commands returns how many commands of the named kind arrived: "admin:0x06",
// "io:0x01", "fabrics:0x01", ...
func (t *Target) Commands(kind string) int {
	for i, p := range []string{"fabrics:0x", "admin:0x", "io:0x"} {
		if len(kind) > len(p) && kind[:len(p)] == p {
			if op, err := strconv.ParseUint(kind[len(p):], 16, 8); err == nil {
				return int(t.counts[i][op].Load())
			}
		}
	}
	t.cmdMu.Lock()
	defer t.cmdMu.Unlock()
	return t.commands[kind]
}

// LastCC returns the last CC written by a controller, for shutdown checks.
func (t *Target) LastCC() nvmeof.CC {
	t.cmdMu.Lock()
	defer t.cmdMu.Unlock()
	return nvmeof.CC(t.commands["cc"])
}

// ReadNamespace copies the namespace's data at off into p (for checks).
func (t *Target) ReadNamespace(nsid uint32, p []byte, off int64) error {
	t.mu.Lock()
	ns := t.ns[nsid]
	t.mu.Unlock()
	if ns == nil {
		return fmt.Errorf("no namespace %d", nsid)
	}
	return ns.readAt(p, off)
}

func (t *Target) addNamespace(nc NamespaceConfig) error {
	if nc.BlockSize == 0 {
		nc.BlockSize = 512
	}
	ns := &namespace{cfg: nc}
	binary.BigEndian.PutUint32(ns.uuid[:], 0x6e766d65)
	binary.BigEndian.PutUint32(ns.uuid[12:], nc.NSID)
	ns.uuid[6] = 0x40
	ns.uuid[8] = 0x80
	if nc.Path != "" {
		f, err := os.OpenFile(nc.Path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := f.Truncate(nc.Size); err != nil {
			f.Close()
			return err
		}
		ns.file = f
	} else {
		ns.mem = make([]byte, nc.Size)
	}
	t.mu.Lock()
	t.ns[nc.NSID] = ns
	t.mu.Unlock()
	return nil
}

// AddNamespace adds a namespace and raises Namespace Attribute Changed.
func (t *Target) AddNamespace(nc NamespaceConfig) error {
	if err := t.addNamespace(nc); err != nil {
		return err
	}
	t.nsChanged(nc.NSID)
	return nil
}

// RemoveNamespace removes a namespace and raises Namespace Attribute
// Changed.
func (t *Target) RemoveNamespace(nsid uint32) {
	t.mu.Lock()
	ns := t.ns[nsid]
	delete(t.ns, nsid)
	t.mu.Unlock()
	if ns != nil && ns.file != nil {
		ns.file.Close()
	}
	t.nsChanged(nsid)
}

// ResizeNamespace changes a memory namespace's size and raises Namespace
// Attribute Changed.
func (t *Target) ResizeNamespace(nsid uint32, size int64) {
	t.mu.Lock()
	ns := t.ns[nsid]
	t.mu.Unlock()
	ns.mu.Lock()
	if ns.file != nil {
		_ = ns.file.Truncate(size)
	} else {
		m := make([]byte, size)
		copy(m, ns.mem)
		ns.mem = m
	}
	ns.cfg.Size = size
	ns.mu.Unlock()
	t.nsChanged(nsid)
}

// SetReferrals replaces the extra discovery log entries and raises
// Discovery Log Page Change on discovery controllers.
func (t *Target) SetReferrals(e []nvmeof.DiscoveryEntry) {
	t.mu.Lock()
	t.cfg.Referrals = e
	t.genctr++
	var cs []*ctrl
	for _, c := range t.ctrls {
		if c.disc {
			cs = append(cs, c)
		}
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.event(nvmeof.AENDiscoveryChanged, nvmeof.AECDiscoveryChange)
	}
}

func (t *Target) nsChanged(nsid uint32) {
	t.mu.Lock()
	var cs []*ctrl
	for _, c := range t.ctrls {
		if !c.disc {
			cs = append(cs, c)
		}
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		if !slices.Contains(c.changed, nsid) {
			c.changed = append(c.changed, nsid)
		}
		c.mu.Unlock()
		c.event(nvmeof.AENNSAttrChanged, nvmeof.AECNSAttr)
	}
}

// event completes an outstanding AER (or keeps the event for the next one)
// if the host enabled the event.
func (c *ctrl) event(aen nvmeof.AEN, bit uint32) {
	c.mu.Lock()
	if c.aecMask&bit == 0 {
		c.mu.Unlock()
		return
	}
	if len(c.aers) == 0 {
		c.events = append(c.events, aen)
		c.mu.Unlock()
		return
	}
	r := c.aers[0]
	c.aers = c.aers[1:]
	c.mu.Unlock()
	r.SetResult(uint32(aen))
	r.Complete(nvmeof.StatusSuccess)
}

func (t *Target) count(kind string) {
	t.cmdMu.Lock()
	t.commands[kind]++
	t.cmdMu.Unlock()
}

// HandleCommand implements rdma.Handler.
func (t *Target) HandleCommand(r *rdma.Request) {
	sqe := r.SQE()
	qid := r.Queue().QID()
	switch {
	case sqe.Opcode() == nvmeof.OpFabrics:
		t.counts[0][sqe[4]].Add(1)
	case qid == 0:
		t.counts[1][sqe.Opcode()].Add(1)
	default:
		t.counts[2][sqe.Opcode()].Add(1)
	}
	t.mu.Lock()
	paused := t.paused
	if paused {
		t.held = append(t.held, r)
	}
	t.mu.Unlock()
	if paused {
		return
	}
	if f := t.cfg.Intercept; f != nil {
		switch act, st := f(qid, sqe); act {
		case Fail:
			r.Complete(st)
			return
		case Hold:
			t.mu.Lock()
			t.held = append(t.held, r)
			t.mu.Unlock()
			return
		case CloseQueue:
			go r.Queue().Close()
			t.mu.Lock()
			t.held = append(t.held, r)
			t.mu.Unlock()
			return
		}
	}
	if r.Data() != nil && sqe.DataDirection() == nvmeof.DirHostToController {
		r.FetchData()
		return
	}
	t.execute(r)
}

// DataReady implements rdma.Handler.
func (t *Target) DataReady(r *rdma.Request, err error) {
	if err != nil {
		r.Complete(nvmeof.StatusDataTransferError)
		return
	}
	t.execute(r)
}

// QueueClosed implements rdma.Handler.
func (t *Target) QueueClosed(q *rdma.ControllerQueue, err error) {
	t.mu.Lock()
	delete(t.queues, q)
	var keep, drop []*rdma.Request
	for _, r := range t.held {
		if r.Queue() == q {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	t.held = keep
	c := t.qctrl[q]
	delete(t.qctrl, q)
	t.mu.Unlock()
	for _, r := range drop {
		r.Complete(nvmeof.StatusAbortSQDeleted)
	}
	if c != nil && q.QID() == 0 {
		c.destroy()
	}
}

// destroy ends a controller: its I/O queues close, its AERs are dropped.
func (c *ctrl) destroy() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	qs := c.queues
	aers := c.aers
	c.aers = nil
	if c.kaCancel != nil {
		c.kaCancel()
	}
	c.mu.Unlock()
	for _, r := range aers {
		r.Complete(nvmeof.StatusAbortSQDeleted)
	}
	for _, q := range qs {
		go q.Close()
	}
	c.t.mu.Lock()
	delete(c.t.ctrls, c.cntlid)
	c.t.mu.Unlock()
}

func (t *Target) execute(r *rdma.Request) {
	sqe := r.SQE()
	q := r.Queue()
	if sqe.Opcode() == nvmeof.OpFabrics {
		t.fabrics(r)
		return
	}
	c := t.ctrlOf(q)
	if c == nil {
		r.Complete(nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR)
		return
	}
	c.mu.Lock()
	c.lastKA = time.Now() // nvmet: any command resets the timer when TBKAS; keep it simple
	rdy := c.csts.RDY()
	c.mu.Unlock()
	if !rdy {
		r.Complete(nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR)
		return
	}
	if q.QID() == 0 {
		c.admin(r)
		return
	}
	c.io(r)
}

func (t *Target) fabrics(r *rdma.Request) {
	sqe := r.SQE()
	q := r.Queue()
	c := t.ctrlOf(q)
	switch sqe[4] {
	case nvmeof.FCTypeConnect:
		t.connect(r)
	case nvmeof.FCTypePropertyGet:
		if c == nil || q.QID() != 0 {
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch sqe.PropertyGetCmd().Offset() {
		case nvmeof.PropCAP:
			var cp nvmeof.CAP
			cp.SetMQES(uint16(t.maxQueueSize() - 1))
			cp.SetCQR(true)
			cp.SetTO(15)
			cp.SetCSS(nvmeof.CAPCSSNVM)
			r.SetResult64(uint64(cp))
		case nvmeof.PropVS:
			r.SetResult(uint32(nvmeof.VS1_3))
		case nvmeof.PropCC:
			r.SetResult(uint32(c.cc))
		case nvmeof.PropCSTS:
			r.SetResult(uint32(c.csts))
		}
		r.Complete(nvmeof.StatusSuccess)
	case nvmeof.FCTypePropertySet:
		if c == nil || q.QID() != 0 {
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
			return
		}
		ps := sqe.PropertySetCmd()
		if ps.Offset() != nvmeof.PropCC {
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
			return
		}
		c.setCC(nvmeof.CC(ps.Value()))
		r.Complete(nvmeof.StatusSuccess)
	default:
		r.Complete(nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR)
	}
}

func (t *Target) maxQueueSize() int {
	if t.cfg.Transport.MaxQueueSize != 0 {
		return t.cfg.Transport.MaxQueueSize
	}
	return rdma.DefaultMaxQueueSize
}

// setCC is nvmet_update_cc.
func (c *ctrl) setCC(cc nvmeof.CC) {
	c.t.cmdMu.Lock()
	c.t.commands["cc"] = int(cc)
	c.t.cmdMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cc
	c.cc = cc
	switch {
	case cc.EN() && !old.EN():
		if cc.IOSQES() != 6 || cc.IOCQES() != 4 || cc.MPS() != 0 || cc.AMS() != 0 || (cc.CSS() != 0 && cc.CSS() != 6) {
			c.csts.SetCFS(true)
			return
		}
		c.csts.SetRDY(true)
	case !cc.EN() && old.EN():
		c.csts.SetRDY(false)
	}
	if cc.SHN() != 0 && old.SHN() == 0 {
		c.csts.SetSHST(nvmeof.SHSTComplete)
	}
}

func (t *Target) connect(r *rdma.Request) {
	sqe := r.SQE()
	q := r.Queue()
	cc := sqe.ConnectCmd()
	d, err := nvmeof.ParseConnectData(r.Data())
	if err != nil {
		fail(r, err)
		return
	}
	subnqn, hostnqn := d.SubNQN(), d.HostNQN()
	if cc.QID() == 0 {
		t.Connects.Add(1)
		disc := nvmeof.IsDiscoveryNQN(subnqn)
		if !disc && subnqn != t.cfg.SubNQN {
			fail(r, &nvmeof.ConnectParamError{InData: true, Offset: nvmeof.ConnectDataOffSUBNQN, Reason: "unknown subsystem"})
			return
		}
		if d.CNTLID() != nvmeof.CNTLIDDynamic {
			fail(r, &nvmeof.ConnectParamError{InData: true, Offset: nvmeof.ConnectDataOffCNTLID, Reason: "cntlid"})
			return
		}
		if !disc && len(t.cfg.AllowedHosts) > 0 && !slices.Contains(t.cfg.AllowedHosts, hostnqn) {
			r.Complete(nvmeof.StatusConnectInvalidHost | nvmeof.StatusDNR)
			return
		}
		t.mu.Lock()
		c := &ctrl{t: t, cntlid: t.nextCtrl, disc: disc, hostnqn: hostnqn, kato: time.Duration(cc.KATO()) * time.Millisecond, lastKA: time.Now()}
		if c.kato == 0 && disc {
			c.kato = nvmeof.NvmetDiscoveryKATO * time.Second
		}
		t.nextCtrl++
		t.ctrls[c.cntlid] = c
		t.mu.Unlock()
		c.queues = append(c.queues, q)
		t.setCtrl(q, c)
		if c.kato > 0 && !t.cfg.IgnoreKATO {
			ctx, cancel := context.WithCancel(context.Background())
			c.kaCancel = cancel
			go c.watchKA(ctx)
		}
		r.SetResult(uint32(nvmeof.NewConnectResponse(c.cntlid)))
		r.Complete(nvmeof.StatusSuccess)
		return
	}
	t.mu.Lock()
	c := t.ctrls[d.CNTLID()]
	t.mu.Unlock()
	if c == nil || c.hostnqn != hostnqn || subnqn != t.cfg.SubNQN {
		fail(r, &nvmeof.ConnectParamError{InData: true, Offset: nvmeof.ConnectDataOffCNTLID, Reason: "no such controller"})
		return
	}
	c.mu.Lock()
	if int(cc.QID()) > c.nq || c.closed {
		c.mu.Unlock()
		fail(r, &nvmeof.ConnectParamError{Offset: nvmeof.ConnectSQEOffQID, Reason: "qid"})
		return
	}
	c.queues = append(c.queues, q)
	c.mu.Unlock()
	t.setCtrl(q, c)
	r.SetResult(uint32(nvmeof.NewConnectResponse(c.cntlid)))
	r.Complete(nvmeof.StatusSuccess)
}

// watchKA tears the controller down when no command came within KATO
// (nvmet_keep_alive_timer).
func (c *ctrl) watchKA(ctx context.Context) {
	tk := time.NewTicker(c.kato / 4)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		c.mu.Lock()
		expired := time.Since(c.lastKA) > c.kato
		c.mu.Unlock()
		if expired {
			c.t.log.Info("keep-alive timer expired", zap.Uint16("cntlid", c.cntlid))
			c.t.count("kato-expired")
			c.destroy()
			return
		}
	}
}

func fail(r *rdma.Request, err error) {
	var pe *nvmeof.ConnectParamError
	if errors.As(err, &pe) {
		r.SetResult(pe.Result())
	}
	r.Complete(nvmeof.StatusFromError(err))
}

func (c *ctrl) admin(r *rdma.Request) {
	sqe := r.SQE()
	t := c.t
	switch sqe.Opcode() {
	case nvmeof.AdminKeepAlive:
		r.Complete(nvmeof.StatusSuccess)
	case nvmeof.AdminAsyncEvent:
		c.mu.Lock()
		if len(c.events) > 0 {
			aen := c.events[0]
			c.events = c.events[1:]
			c.mu.Unlock()
			r.SetResult(uint32(aen))
			r.Complete(nvmeof.StatusSuccess)
			return
		}
		c.aers = append(c.aers, r)
		c.mu.Unlock()
	case nvmeof.AdminIdentify:
		c.identify(r)
	case nvmeof.AdminGetLogPage:
		c.getLogPage(r)
	case nvmeof.AdminSetFeatures:
		fc := sqe.FeaturesCmd()
		switch fc.FID() {
		case nvmeof.FeatNumQueues:
			nsq, ncq := nvmeof.DecodeNumQueues(fc.Value())
			n := min(nsq, ncq, t.cfg.MaxQueues)
			c.mu.Lock()
			c.nq = n
			c.mu.Unlock()
			r.SetResult(nvmeof.EncodeNumQueues(n, n))
			r.Complete(nvmeof.StatusSuccess)
		case nvmeof.FeatAsyncEventConfig:
			c.mu.Lock()
			c.aecMask = fc.Value()
			c.mu.Unlock()
			r.Complete(nvmeof.StatusSuccess)
		case nvmeof.FeatKeepAliveTimer:
			c.mu.Lock()
			c.kato = time.Duration(fc.Value()) * time.Millisecond
			c.mu.Unlock()
			r.Complete(nvmeof.StatusSuccess)
		default:
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
		}
	case nvmeof.AdminGetFeatures:
		fc := sqe.FeaturesCmd()
		switch fc.FID() {
		case nvmeof.FeatNumQueues:
			c.mu.Lock()
			r.SetResult(nvmeof.EncodeNumQueues(max(c.nq, 1), max(c.nq, 1)))
			c.mu.Unlock()
			r.Complete(nvmeof.StatusSuccess)
		case nvmeof.FeatKeepAliveTimer:
			c.mu.Lock()
			r.SetResult(uint32(c.kato / time.Millisecond))
			c.mu.Unlock()
			r.Complete(nvmeof.StatusSuccess)
		default:
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
		}
	default:
		r.Complete(nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR)
	}
}

func (c *ctrl) identify(r *rdma.Request) {
	t := c.t
	sqe := r.SQE()
	ic := sqe.IdentifyCmd()
	d := r.Data()
	if len(d) != nvmeof.IdentifyDataSize {
		r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
		return
	}
	clear(d)
	switch ic.CNS() {
	case nvmeof.CNSController:
		id := (*nvmeof.IdentifyController)(d)
		id.SetSN("testctl0001")
		id.SetMN("nvmetd initiator testctl")
		id.SetFR("1.0")
		id.SetRAB(6)
		id.SetCMIC(nvmeof.CMICMultiCtrl)
		xfer := t.cfg.Transport.MaxTransferSize
		if xfer == 0 {
			xfer = rdma.DefaultMaxTransferSize
		}
		mdts := uint8(0)
		for 4096<<mdts < xfer {
			mdts++
		}
		id.SetMDTS(mdts)
		id.SetCNTLID(c.cntlid)
		id.SetVER(nvmeof.VS1_3)
		id.SetCTRATT(nvmeof.CTRATTHostID128)
		id.SetACL(3)
		id.SetAERL(3)
		id.SetLPA(nvmeof.LPAExtendedData)
		id.SetELPE(127)
		id.SetSQES(0x66)
		id.SetCQES(0x44)
		id.SetMAXCMD(uint16(t.maxQueueSize()))
		inline := t.cfg.Transport.InlineDataSize
		if inline == 0 {
			inline = rdma.DefaultInlineDataSize
		}
		if c.disc {
			id.SetCNTRLTYPE(nvmeof.CntrlTypeDiscovery)
			id.SetSUBNQN(nvmeof.DiscoveryNQN)
			id.SetOAES(nvmeof.AECDiscoveryChange)
			id.SetSGLS(nvmeof.SGLSSupported | nvmeof.SGLSKeyed)
			id.SetMSDBD(1)
			id.SetIOCCSZ(4)
			id.SetIORCSZ(1)
		} else {
			id.SetCNTRLTYPE(nvmeof.CntrlTypeIO)
			id.SetSUBNQN(t.cfg.SubNQN)
			id.SetOAES(t.cfg.OAES)
			id.SetKAS(nvmeof.NvmetKAS)
			t.mu.Lock()
			var nn uint32
			for nsid := range t.ns {
				nn = max(nn, nsid)
			}
			t.mu.Unlock()
			id.SetNN(max(nn, 1))
			id.SetMNAN(max(nn, 1))
			id.SetONCS(nvmeof.ONCSDSM | nvmeof.ONCSWriteZeroes)
			if !t.cfg.NoVWC {
				id.SetVWC(nvmeof.VWCPresent)
			}
			id.SetSGLS(nvmeof.SGLSNvmet)
			id.SetIOCCSZ(nvmeof.IOCCSZ(inline))
			id.SetIORCSZ(nvmeof.IORCSZ)
			id.SetMSDBD(1)
		}
		r.Complete(nvmeof.StatusSuccess)
	case nvmeof.CNSActiveNSList:
		t.mu.Lock()
		var ids []uint32
		for nsid := range t.ns {
			ids = append(ids, nsid)
		}
		t.mu.Unlock()
		slices.Sort(ids)
		nvmeof.EncodeNSList(d, ids, sqe.NSID())
		r.Complete(nvmeof.StatusSuccess)
	case nvmeof.CNSNamespace, nvmeof.CNSNSDescList:
		t.mu.Lock()
		ns := t.ns[sqe.NSID()]
		t.mu.Unlock()
		if ns == nil {
			if ic.CNS() == nvmeof.CNSNSDescList {
				r.Complete(nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR)
				return
			}
			r.Complete(nvmeof.StatusSuccess) // zeroes for an inactive NSID
			return
		}
		if ic.CNS() == nvmeof.CNSNSDescList {
			_, _ = nvmeof.EncodeNSDescriptors(d, nvmeof.NSIdentifiers{UUID: ns.uuid, HasUUID: true, NGUID: ns.uuid, HasNGUID: true})
			r.Complete(nvmeof.StatusSuccess)
			return
		}
		id := (*nvmeof.IdentifyNamespace)(d)
		ns.mu.RLock()
		blocks := uint64(ns.cfg.Size) / uint64(ns.cfg.BlockSize)
		ns.mu.RUnlock()
		id.SetNSZE(blocks)
		id.SetNCAP(blocks)
		id.SetNUSE(blocks)
		id.SetNMIC(nvmeof.NMICShared)
		id.SetNGUID(ns.uuid)
		lbads := uint8(0)
		for 1<<lbads < ns.cfg.BlockSize {
			lbads++
		}
		id.SetLBAF(0, nvmeof.LBAFormat{LBADS: lbads})
		r.Complete(nvmeof.StatusSuccess)
	default:
		r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
	}
}

func (c *ctrl) getLogPage(r *rdma.Request) {
	t := c.t
	lp := r.SQE().GetLogPageCmd()
	d := r.Data()
	if uint64(len(d)) != lp.NumBytes() {
		r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
		return
	}
	var page []byte
	switch lp.LID() {
	case nvmeof.LIDDiscovery:
		if !c.disc {
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
			return
		}
		host, port, _ := net.SplitHostPort(r.Queue().LocalAddr().String())
		entries := []nvmeof.DiscoveryEntry{{
			TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe,
			TReq: nvmeof.TREQNotSpecified | nvmeof.TREQDisableSQFlow, PortID: 1, CntlID: nvmeof.CNTLIDDynamic,
			ASQSZ: nvmeof.DiscoveryASQSZ, TrSvcID: port, SubNQN: t.cfg.SubNQN, TrAddr: host,
			RDMAQPType: nvmeof.RDMAQPTypeRC, RDMAPRType: nvmeof.RDMAPRTypeNone, RDMACMS: nvmeof.RDMACMSRDMACM,
		}}
		t.mu.Lock()
		entries = append(entries, t.cfg.Referrals...)
		gen := t.genctr
		t.mu.Unlock()
		var err error
		if page, err = nvmeof.AppendDiscoveryLog(nil, gen, entries); err != nil {
			r.Complete(nvmeof.StatusInternalError)
			return
		}
	case nvmeof.LIDChangedNSList:
		c.mu.Lock()
		page = make([]byte, nvmeof.ChangedNSListSize)
		slices.Sort(c.changed)
		nvmeof.EncodeChangedNSList(page, c.changed)
		if !lp.RAE() {
			c.changed = nil
		}
		c.mu.Unlock()
	case nvmeof.LIDSMART:
		page = make([]byte, nvmeof.SMARTLogSize)
	default:
		r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
		return
	}
	if err := nvmeof.CopyLogPage(d, page, lp.LPO()); err != nil {
		r.Complete(nvmeof.StatusFromError(err))
		return
	}
	r.Complete(nvmeof.StatusSuccess)
}

func (c *ctrl) io(r *rdma.Request) {
	t := c.t
	sqe := r.SQE()
	t.mu.Lock()
	ns := t.ns[sqe.NSID()]
	t.mu.Unlock()
	if ns == nil {
		if sqe.Opcode() == nvmeof.NVMFlush && sqe.NSID() == nvmeof.NSIDAll {
			r.Complete(nvmeof.StatusSuccess)
			return
		}
		r.Complete(nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR)
		return
	}
	bs := int64(ns.cfg.BlockSize)
	if ns.file != nil {
		go t.ioSlow(ns, r, bs) // file I/O off the engine goroutine
		return
	}
	switch sqe.Opcode() {
	case nvmeof.NVMRead, nvmeof.NVMWrite:
		// The fast path, without allocations: memory namespaces.
		rw := sqe.RWCmd()
		off := int64(rw.SLBA()) * bs
		n := int64(rw.Blocks()) * bs
		if int64(len(r.Data())) != n {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return
		}
		var err error
		if sqe.Opcode() == nvmeof.NVMRead {
			err = ns.readAt(r.Data(), off)
		} else {
			err = ns.writeAt(r.Data(), off)
		}
		if err != nil {
			r.Complete(nvmeof.StatusLBAOutOfRange | nvmeof.StatusDNR)
			return
		}
		r.Complete(nvmeof.StatusSuccess)
	default:
		t.ioSlow(ns, r, bs)
	}
}

func (t *Target) ioSlow(ns *namespace, r *rdma.Request, bs int64) {
	sqe := r.SQE()
	switch sqe.Opcode() {
	case nvmeof.NVMRead, nvmeof.NVMWrite:
		rw := sqe.RWCmd()
		off := int64(rw.SLBA()) * bs
		n := int64(rw.Blocks()) * bs
		if int64(len(r.Data())) != n {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return
		}
		ns.mu.RLock()
		size := ns.cfg.Size
		ns.mu.RUnlock()
		if off+n > size {
			r.Complete(nvmeof.StatusLBAOutOfRange | nvmeof.StatusDNR)
			return
		}
		run(ns, r, func() error {
			if sqe.Opcode() == nvmeof.NVMRead {
				return ns.readAt(r.Data(), off)
			}
			return ns.writeAt(r.Data(), off)
		})
	case nvmeof.NVMFlush:
		run(ns, r, ns.sync)
	case nvmeof.NVMWriteZeroes:
		rw := sqe.RWCmd()
		off := int64(rw.SLBA()) * bs
		n := int64(rw.Blocks()) * bs
		run(ns, r, func() error { return ns.writeAt(make([]byte, n), off) })
	case nvmeof.NVMDatasetManagement:
		rs, err := nvmeof.ParseDSMRanges(r.Data(), sqe.DSMCmd().NumRanges())
		if err != nil {
			r.Complete(nvmeof.StatusFromError(err))
			return
		}
		run(ns, r, func() error {
			for i := 0; i < rs.Len(); i++ {
				rg := rs.At(i)
				if err := ns.writeAt(make([]byte, int64(rg.NLB())*bs), int64(rg.SLBA())*bs); err != nil {
					return err
				}
			}
			return nil
		})
	default:
		r.Complete(nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR)
	}
}

// run executes f for r and completes it.
func run(ns *namespace, r *rdma.Request, f func() error) {
	exec := func() {
		if err := f(); err != nil {
			r.Complete(nvmeof.StatusInternalError)
			return
		}
		r.Complete(nvmeof.StatusSuccess)
	}
	exec()
}

func (ns *namespace) readAt(p []byte, off int64) error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.file != nil {
		_, err := ns.file.ReadAt(p, off)
		return err
	}
	if off+int64(len(p)) > int64(len(ns.mem)) {
		return errors.New("out of range")
	}
	copy(p, ns.mem[off:])
	return nil
}

func (ns *namespace) writeAt(p []byte, off int64) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.file != nil {
		_, err := ns.file.WriteAt(p, off)
		return err
	}
	if off+int64(len(p)) > int64(len(ns.mem)) {
		return errors.New("out of range")
	}
	copy(ns.mem[off:], p)
	return nil
}

func (ns *namespace) sync() error {
	if ns.file != nil {
		return ns.file.Sync()
	}
	return nil
}

func (t *Target) ctrlOf(q *rdma.ControllerQueue) *ctrl {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.qctrl[q]
}

func (t *Target) setCtrl(q *rdma.ControllerQueue, c *ctrl) {
	t.mu.Lock()
	t.qctrl[q] = c
	t.mu.Unlock()
}
