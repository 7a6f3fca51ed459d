package initiator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// MultipathConfig configures a Subsystem (nvme_core's multipath
// parameters and the fabrics option fast_io_fail_tmo).
type MultipathConfig struct {
	// IOPolicy is the path selection policy (default numa).
	IOPolicy IOPolicy
	// FastIOFailTimeout is fast_io_fail_tmo: how long after a path's
	// controller lost its connection I/O may wait for it. Once it has
	// passed on every path, queued and new I/O fail with ErrNoPath
	// instead of waiting until the controllers are given up
	// (CtrlLossTimeout). Zero or negative: off (Linux's default, -1).
	FastIOFailTimeout time.Duration
	// Logger receives path events (default: none).
	Logger *zap.Logger
	// OnChange, if set, is called after a path's namespaces or ANA states
	// were read again (on a goroutine of the path: it must not block for
	// long).
	OnChange func(*Path)
}

// Subsystem is one NVM subsystem reached through several controllers
// (paths), as the Linux host's nvme_subsystem with native multipath: a
// namespace with the same NSID and identifiers on every path is one Head,
// whose I/O goes to a path chosen by ANA state and I/O policy and moves to
// another path when one fails. Its methods are safe for concurrent use.
type Subsystem struct {
	nqn    string
	cfg    MultipathConfig
	log    *zap.Logger
	policy atomic.Uint32

	paths atomic.Pointer[[]*Path] // copy on write, under mu

	mu      sync.Mutex
	heads   map[uint32]*Head
	retired []*Head // heads of removed namespaces (closed with the subsystem)
	closed  bool
}

// NewSubsystem returns a subsystem without paths; AddPath connects them.
func NewSubsystem(subnqn string, cfg MultipathConfig) *Subsystem {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &Subsystem{nqn: subnqn, cfg: cfg, log: cfg.Logger.With(zap.String("subnqn", subnqn)), heads: map[uint32]*Head{}}
	s.policy.Store(uint32(cfg.IOPolicy))
	s.paths.Store(&[]*Path{})
	return s
}

// NQN returns the subsystem NQN.
func (s *Subsystem) NQN() string { return s.nqn }

// IOPolicy returns the path selection policy.
func (s *Subsystem) IOPolicy() IOPolicy { return IOPolicy(s.policy.Load()) }

// SetIOPolicy changes the path selection policy (as writing the
// subsystem's iopolicy attribute): it applies to the next I/O.
func (s *Subsystem) SetIOPolicy(p IOPolicy) {
	s.policy.Store(uint32(p))
	for _, h := range s.Namespaces() {
		h.cur.Store(nil)
	}
}

// Paths returns the subsystem's paths, in the order they were added.
func (s *Subsystem) Paths() []*Path { return slices.Clone(*s.paths.Load()) }

// Namespaces returns the subsystem's multipath namespaces, by NSID.
func (s *Subsystem) Namespaces() []*Head {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Head, 0, len(s.heads))
	for _, h := range s.heads {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *Head) int { return int(a.nsid) - int(b.nsid) })
	return out
}

// Namespace returns the multipath namespace nsid, or nil.
func (s *Subsystem) Namespace(nsid uint32) *Head {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[nsid]
}

// AddPath connects a controller of the subsystem (cfg.SubNQN must be its
// NQN) and adds it as a path: its ANA log is read and its namespaces join
// the subsystem's (a namespace whose identifiers differ from the one of
// the same NSID on other paths is not used through this path, as Linux
// refuses duplicate NSIDs with other IDs).
func (s *Subsystem) AddPath(ctx context.Context, cfg Config) (*Path, error) {
	if cfg.SubNQN != s.nqn {
		return nil, fmt.Errorf("initiator: path to %q added to subsystem %q", cfg.SubNQN, s.nqn)
	}
	p := &Path{sub: s, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.ns.Store(&map[uint32]*Namespace{})
	user := cfg.OnEvent
	cfg.OnEvent = func(e Event) {
		p.event(e)
		if user != nil {
			user(e)
		}
	}
	c, err := Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.c = c
	p.log = s.log.With(zap.String("traddr", c.cfg.Address), zap.Uint16("cntlid", c.CNTLID()))
	if err := p.readANA(ctx); err != nil {
		p.log.Warn("reading the ANA log", zap.Error(err))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close(ctx)
		return nil, ErrControllerClosed
	}
	paths := append(slices.Clone(*s.paths.Load()), p)
	s.paths.Store(&paths)
	s.refreshLocked()
	s.mu.Unlock()
	go p.loop()
	p.log.Info("path added", zap.Int("paths", len(paths)))
	s.kickHeads()
	return p, nil
}

// RemovePath closes one path: it is no longer chosen, its I/O in flight
// drains (what fails moves to another path), and its controller is shut
// down.
func (s *Subsystem) RemovePath(ctx context.Context, p *Path) error {
	s.mu.Lock()
	paths := slices.Clone(*s.paths.Load())
	i := slices.Index(paths, p)
	if i < 0 {
		s.mu.Unlock()
		return errors.New("initiator: not a path of this subsystem")
	}
	paths = slices.Delete(paths, i, i+1)
	s.paths.Store(&paths)
	for _, h := range s.heads {
		h.cur.CompareAndSwap(p, nil)
	}
	s.mu.Unlock()
	p.removed.Store(true)
	err := p.c.Close(ctx)
	close(p.stop)
	<-p.done
	s.kickHeads()
	return err
}

// Close closes every path: new I/O is refused, I/O waiting for a path
// fails with ErrControllerClosed, and each controller is shut down (its
// I/O in flight drains first).
func (s *Subsystem) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	heads := make([]*Head, 0, len(s.heads)+len(s.retired))
	for _, h := range s.heads {
		heads = append(heads, h)
	}
	heads = append(heads, s.retired...)
	s.mu.Unlock()
	for _, h := range heads {
		h.close()
	}
	var errs []error
	for _, p := range s.Paths() {
		if err := s.RemovePath(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// refreshLocked builds each path's table of the namespaces it carries,
// creates the heads of new NSIDs (nvme_find_ns_head / nvme_alloc_ns_head)
// and retires those no path has any more while some path is live (the
// namespace was removed: its I/O fails with ErrNamespaceGone).
func (s *Subsystem) refreshLocked() {
	present := map[uint32]bool{}
	live := false
	for _, p := range *s.paths.Load() {
		live = live || p.c.live.Load()
		m := map[uint32]*Namespace{}
		for _, ns := range p.c.Namespaces() {
			h := s.heads[ns.nsid]
			if h == nil {
				if s.closed {
					continue
				}
				h = newHead(s, ns)
				s.heads[ns.nsid] = h
				s.log.Info("multipath namespace", zap.Uint32("nsid", ns.nsid), zap.Int64("size", ns.Size()))
			} else if ids := ns.Identifiers(); ids != h.ids || ns.bs != h.bs {
				p.log.Warn("namespace with other identifiers than on the other paths: not used through this path",
					zap.Uint32("nsid", ns.nsid))
				continue
			}
			h.size.Store(ns.Size())
			h.readOnly.Store(ns.ReadOnly())
			m[ns.nsid] = ns
			present[ns.nsid] = true
		}
		p.ns.Store(&m)
	}
	if !live {
		return
	}
	for nsid, h := range s.heads {
		if !present[nsid] {
			h.gone.Store(true)
			delete(s.heads, nsid)
			s.retired = append(s.retired, h)
			h.kickRequeue()
			s.log.Info("multipath namespace removed", zap.Uint32("nsid", nsid))
		}
	}
}

// kickHeads wakes the requeue loop of every head: a path's state changed.
func (s *Subsystem) kickHeads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.heads {
		h.cur.Store(nil)
		h.kickRequeue()
	}
}

// Path is one controller of a Subsystem.
type Path struct {
	sub *Subsystem
	c   *Controller
	log *zap.Logger

	ns         atomic.Pointer[map[uint32]*Namespace] // namespaces of the subsystem's heads on this path
	ana        atomic.Pointer[anaStates]
	anaPending atomic.Bool // an ANA error came back: state unknown until the log is read (NVME_NS_ANA_PENDING)
	failfast   atomic.Bool // fast_io_fail_tmo passed while reconnecting (NVME_CTRL_FAILFAST_EXPIRED)
	removed    atomic.Bool
	depth      atomic.Int32 // multipath commands in flight (nr_active)

	wantANA  atomic.Bool
	wantScan atomic.Bool
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}

	ffMu  sync.Mutex
	ffGen uint64
}

// anaStates is what a path's ANA log said.
type anaStates struct {
	byNSID map[uint32]nvmeof.ANAState
	groups []nvmeof.ANAGroup
	chgcnt uint64
}

// PathANAGroup is one ANA group as a path reports it.
type PathANAGroup struct {
	ID    uint32
	State nvmeof.ANAState
	NSIDs []uint32
}

// Controller returns the path's controller.
func (p *Path) Controller() *Controller { return p.c }

// Transport is the path's transport as nvme-cli names it: rdma or tcp.
func (p *Path) Transport() string { return p.c.cfg.TransportName() }

// Address returns the controller's transport address.
func (p *Path) Address() string { return p.c.cfg.Address }

// ANAGroups returns the groups of the path's last ANA log (nil if the
// controller does not report ANA).
func (p *Path) ANAGroups() []PathANAGroup {
	a := p.ana.Load()
	if a == nil {
		return nil
	}
	out := make([]PathANAGroup, 0, len(a.groups))
	for _, g := range a.groups {
		out = append(out, PathANAGroup{ID: g.ID, State: g.State, NSIDs: slices.Clone(g.NSIDs)})
	}
	return out
}

// ANAState returns the ANA state of namespace nsid through this path:
// optimized when the controller does not report ANA, inaccessible when
// its log does not list the namespace.
func (p *Path) ANAState(nsid uint32) nvmeof.ANAState {
	a := p.ana.Load()
	if a == nil {
		return nvmeof.ANAOptimized
	}
	if st, ok := a.byNSID[nsid]; ok {
		return st
	}
	return nvmeof.ANAInaccessible
}

// event observes the path controller's events (on its event goroutine).
func (p *Path) event(e Event) {
	switch e.Kind {
	case EventAsync:
		if e.AEN == nvmeof.AENANAChange {
			p.wantANA.Store(true)
			p.wake()
		}
	case EventNamespacesChanged:
		// A namespace added to a group takes the group's state: Linux's
		// nvme_mpath_add_disk looks its ANAGRPID up in the cached ANA log
		// (and reads the log again when the group is not in it). The
		// path's states are by NSID, from the log's NSID lists, which
		// list a new namespace only from the next log: read it again
		// after the scan, or a namespace added to an optimized group
		// stays inaccessible through every path until an ANA change.
		p.wantScan.Store(true)
		p.wantANA.Store(true)
		p.wake()
	case EventReconnecting:
		// The path's ANA states are unknown from now until its log is
		// read again: they may change while the association is down (a
		// gateway hands its group over, the notice is lost with the
		// association). Linux reads the log before the reconnected
		// controller goes live (nvme_mpath_init_identify); here the path
		// stays unusable until the loop has read it (NVME_NS_ANA_PENDING).
		p.anaPending.Store(true)
		p.ffMu.Lock()
		p.ffGen++
		gen := p.ffGen
		p.ffMu.Unlock()
		if d := p.sub.cfg.FastIOFailTimeout; d > 0 {
			// nvme_start_failfast_work.
			time.AfterFunc(d, func() {
				p.ffMu.Lock()
				expired := p.ffGen == gen
				if expired {
					p.failfast.Store(true)
				}
				p.ffMu.Unlock()
				if expired {
					p.logger().Info("failfast expired")
					p.sub.kickHeads()
				}
			})
		}
		p.sub.kickHeads()
	case EventReconnected:
		p.ffMu.Lock()
		p.ffGen++
		p.failfast.Store(false)
		p.ffMu.Unlock()
		// nvme_mpath_init_identify reads the ANA log of a reconnected
		// controller; the rescan that follows may bring namespaces.
		p.wantANA.Store(true)
		p.wantScan.Store(true)
		p.wake()
	case EventLost:
		p.sub.kickHeads()
	}
}

func (p *Path) logger() *zap.Logger {
	if p.log != nil {
		return p.log
	}
	return p.sub.log
}

func (p *Path) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop reads the ANA log and the namespaces when events ask for it.
func (p *Path) loop() {
	defer close(p.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
		case <-p.done:
		}
		cancel()
	}()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		if p.wantScan.Swap(false) {
			p.sub.mu.Lock()
			p.sub.refreshLocked()
			p.sub.mu.Unlock()
		}
		if p.wantANA.Swap(false) || p.anaPending.Load() {
			if err := p.readANA(ctx); err != nil && ctx.Err() == nil {
				p.logger().Warn("reading the ANA log", zap.Error(err))
				if p.anaPending.Load() {
					// The path stays unusable until a read succeeds:
					// try again (a reconnect or a live path's next
					// event would too, but need not come).
					time.AfterFunc(anaRetry, p.wake)
				}
			}
		}
		p.sub.kickHeads()
		if f := p.sub.cfg.OnChange; f != nil {
			f(p)
		}
	}
}

// anaRetry is the wait before the ANA log is read again after a failed
// read left a path's states unknown.
const anaRetry = time.Second

// readANA reads the ANA log page (nvme_read_ana_log: LID 0x0C with the
// NSIDs, RAE clear so the ANA Change notice is unmasked again) and
// updates the path's states.
func (p *Path) readANA(ctx context.Context) error {
	id := p.c.IdentifyController()
	if id.CMIC()&nvmeof.CMICANA == 0 {
		p.ana.Store(nil)
		p.anaPending.Store(false)
		return nil
	}
	nns := id.MNAN()
	if nns == 0 {
		nns = id.NN()
	}
	size := nvmeof.ANALogHeaderSize + int(id.NANAGRPID())*nvmeof.ANAGroupDescSize + int(min(nns, 1<<16))*4
	size = min(size, p.c.MaxTransferSize())
	buf := make([]byte, size)
	ctx, cancel := context.WithTimeout(ctx, p.c.cfg.AdminTimeout)
	defer cancel()
	if err := p.c.GetLogPage(ctx, nvmeof.LIDANA, nvmeof.NSIDAll, 0, false, buf); err != nil {
		return err
	}
	l, err := nvmeof.ParseANALog(buf)
	if err != nil {
		return fmt.Errorf("initiator: ANA log: %w", err)
	}
	a := &anaStates{byNSID: map[uint32]nvmeof.ANAState{}, groups: l.Groups, chgcnt: l.ChangeCount}
	for _, g := range l.Groups {
		for _, nsid := range g.NSIDs {
			a.byNSID[nsid] = g.State
		}
	}
	old := p.ana.Swap(a)
	p.anaPending.Store(false)
	for _, g := range l.Groups {
		if old == nil || stateOfGroup(old.groups, g.ID) != g.State {
			// nvme_update_ana_state's "ANA group %d: %s."
			p.logger().Info("ANA group state", zap.Uint32("anagrpid", g.ID), zap.Stringer("state", g.State), zap.Uint32s("nsids", g.NSIDs))
		}
	}
	return nil
}

func stateOfGroup(groups []nvmeof.ANAGroup, id uint32) nvmeof.ANAState {
	for _, g := range groups {
		if g.ID == id {
			return g.State
		}
	}
	return 0
}

// namespace returns the path's namespace nsid if it belongs to the head.
func (p *Path) namespace(nsid uint32) *Namespace {
	return (*p.ns.Load())[nsid]
}

// available reports whether I/O may wait for the path
// (nvme_available_path): its controller is live or reconnecting, and
// fast_io_fail_tmo has not passed.
func (p *Path) available() bool {
	if p.removed.Load() || p.failfast.Load() {
		return false
	}
	switch p.c.State() {
	case StateLive, StateResetting, StateConnecting, StateNew:
		return true
	}
	return false
}

// Head is a namespace of a Subsystem reached through all its paths (the
// Linux nvme_ns_head and its multipath disk). Its I/O methods are those of
// Namespace, and safe for concurrent use.
type Head struct {
	sub      *Subsystem
	nsid     uint32
	ids      nvmeof.NSIdentifiers
	bs       int
	lbaShift uint8
	size     atomic.Int64
	readOnly atomic.Bool
	closed   atomic.Bool
	gone     atomic.Bool

	cur    atomic.Pointer[Path] // current path (numa, round-robin)
	doneFn func(*Request)

	rqMu    perfcount.Mutex
	requeue []*Request // I/O waiting for a usable path
	spare   []*Request
	rqKick  chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	rqDone  chan struct{}

	failovers atomic.Int64

	pool sync.Pool // *syncReq
}

func newHead(s *Subsystem, ns *Namespace) *Head {
	h := &Head{sub: s, nsid: ns.nsid, ids: ns.Identifiers(), bs: ns.bs, lbaShift: ns.lbaShift,
		rqKick: make(chan struct{}, 1), rqDone: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.doneFn = h.done
	go h.requeueLoop()
	return h
}

// NSID returns the namespace identifier.
func (h *Head) NSID() uint32 { return h.nsid }

// Subsystem returns the head's subsystem.
func (h *Head) Subsystem() *Subsystem { return h.sub }

// Identifiers returns the namespace's identifiers (EUI-64, NGUID, UUID).
func (h *Head) Identifiers() nvmeof.NSIdentifiers { return h.ids }

// Size returns the namespace size in bytes.
func (h *Head) Size() int64 { return h.size.Load() }

// BlockSize returns the logical block size in bytes.
func (h *Head) BlockSize() int { return h.bs }

// Blocks returns the namespace size in logical blocks.
func (h *Head) Blocks() uint64 { return uint64(h.size.Load()) >> h.lbaShift }

// ReadOnly reports whether the namespace is write protected.
func (h *Head) ReadOnly() bool { return h.readOnly.Load() }

// Failovers returns how many times an I/O went back to the head for
// another path.
func (h *Head) Failovers() int64 { return h.failovers.Load() }

// CurrentPath returns the path the last I/O was sent on by the numa or
// round-robin policy (nil: none yet, or it was cleared by a path event).
func (h *Head) CurrentPath() *Path { return h.cur.Load() }

// Submit starts r on a path chosen by the I/O policy. If no path is usable
// now but one may come back, r waits for it (nvme_ns_head_submit_bio's
// requeue list); if none may, Submit returns ErrNoPath. A path error
// (a path-related status such as ANA Inaccessible, a lost connection, a
// controller that is not live) sends r again on another path once its
// commands on the failed one are over: a command is never outstanding on
// two paths at once. Otherwise Submit is Namespace.Submit.
func (h *Head) Submit(ctx context.Context, r *Request) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return h.start(ctx, r)
}

// TrySubmit starts r like Submit if a command slot of the chosen path is
// free now (Namespace.TrySubmit): it never waits for a slot.
func (h *Head) TrySubmit(r *Request) error { return h.start(nil, r) }

func (h *Head) start(ctx context.Context, r *Request) error {
	if r.Done == nil {
		return errors.New("initiator: request without Done")
	}
	if h.closed.Load() {
		return ErrControllerClosed
	}
	if h.gone.Load() {
		return ErrNamespaceGone
	}
	r.mpDone, r.Done, r.mpHead, r.failover, r.lastPath = r.Done, h.doneFn, h, true, nil
	err := h.dispatch(ctx, r, true)
	if err != nil {
		h.restore(r)
	}
	return err
}

// restore gives r back its caller's Done.
func (h *Head) restore(r *Request) {
	r.Done, r.mpDone, r.mpHead, r.mpPath, r.failover = r.mpDone, nil, nil, nil, false
}

// findPath picks the path for the next I/O (nvme_find_path).
func (h *Head) findPath() (*Path, *Namespace) {
	paths := *h.sub.paths.Load()
	var buf [8]pathView
	views := buf[:0]
	cur, curp := -1, h.cur.Load()
	for i, p := range paths {
		ns := p.namespace(h.nsid)
		views = append(views, pathView{
			usable: ns != nil && p.c.live.Load() && !p.anaPending.Load() && !ns.gone.Load(),
			state:  p.ANAState(h.nsid),
			depth:  p.depth.Load(),
		})
		if p == curp {
			cur = i
		}
	}
	i := selectPath(IOPolicy(h.sub.policy.Load()), views, cur)
	if i < 0 {
		return nil, nil
	}
	p := paths[i]
	if p != curp {
		h.cur.Store(p)
	}
	return p, p.namespace(h.nsid)
}

// noPath is the error of I/O that no path may carry: ErrNoPath, with
// the error of the first path's controller if it is dead (ErrControllerLost
// when ctrl_loss_tmo gave it up).
func (h *Head) noPath() error {
	for _, p := range *h.sub.paths.Load() {
		if err := p.c.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrNoPath, err)
		}
	}
	return ErrNoPath
}

// Gone reports whether the namespace was removed: no path has it any more
// (its I/O fails with ErrNamespaceGone).
func (h *Head) Gone() bool { return h.gone.Load() }

// MaxTransferSize returns the largest transfer of one command on every
// path (the smallest of the paths' limits).
func (h *Head) MaxTransferSize() int {
	m := 0
	for _, p := range *h.sub.paths.Load() {
		if x := p.c.MaxTransferSize(); x > 0 && (m == 0 || x < m) {
			m = x
		}
	}
	return m
}

// available reports whether some path may carry I/O again.
func (h *Head) available() bool {
	for _, p := range *h.sub.paths.Load() {
		if p.available() {
			return true
		}
	}
	return false
}

// dispatch sends r on a usable path, or keeps it on the requeue list if
// none is usable now but one may come back. top: called by Submit (an
// error is returned, nothing started); otherwise an error is r's result.
func (h *Head) dispatch(ctx context.Context, r *Request, top bool) error {
	for tries := 0; ; tries++ {
		if h.gone.Load() {
			return ErrNamespaceGone
		}
		p, ns := h.findPath()
		if p == nil {
			if !h.available() {
				return h.noPath()
			}
			if ctx == nil && top {
				return ErrNoSlot // TrySubmit does not wait
			}
			h.rqMu.Lock()
			h.requeue = append(h.requeue, r)
			h.rqMu.Unlock()
			if p, _ := h.findPath(); p != nil {
				h.kickRequeue() // a path came back meanwhile
			}
			return nil
		}
		r.mpPath = p
		p.depth.Add(1)
		err := ns.submit(ctx, r, false)
		if err == nil {
			return nil
		}
		p.depth.Add(-1)
		r.mpPath = nil
		if !isPathError(err) || tries >= 4 {
			return err
		}
		// The controller went down between the choice and the
		// submission: choose again.
	}
}

// done is the Done of a request in flight on a path.
func (h *Head) done(r *Request) {
	p := r.mpPath
	r.mpPath, r.lastPath = nil, p
	if p != nil {
		p.depth.Add(-1)
	}
	if r.Err != nil && !h.closed.Load() && isPathError(r.Err) {
		// nvme_failover_req.
		h.failovers.Add(1)
		if r.PathFailed != nil {
			r.PathFailed(r, p, r.Err)
		}
		if p != nil {
			h.cur.CompareAndSwap(p, nil)
			if isANAError(r.Err) {
				p.anaPending.Store(true)
				p.wantANA.Store(true)
				p.wake()
			}
		}
		h.rqMu.Lock()
		h.requeue = append(h.requeue, r)
		h.rqMu.Unlock()
		h.kickRequeue()
		return
	}
	h.finish(r)
}

// finish completes r to its caller.
func (h *Head) finish(r *Request) {
	h.restore(r)
	r.Done(r)
}

func (h *Head) kickRequeue() {
	select {
	case h.rqKick <- struct{}{}:
	default:
	}
}

// requeuePoll bounds the wait of requeued I/O for a wake-up.
const requeuePoll = 100 * time.Millisecond

// requeueLoop sends the requeued I/O again (nvme_requeue_work) when a path
// event or a failover wakes it, and at least every requeuePoll while some
// waits.
func (h *Head) requeueLoop() {
	defer close(h.rqDone)
	t := time.NewTimer(requeuePoll)
	t.Stop()
	defer t.Stop()
	var poll <-chan time.Time // armed while I/O waits
	for {
		select {
		case <-h.rqKick:
		case <-poll:
		case <-h.ctx.Done():
			h.rqMu.Lock()
			list := h.requeue
			h.requeue = nil
			h.rqMu.Unlock()
			for _, r := range list {
				r.Err = ErrControllerClosed
				h.finish(r)
			}
			return
		}
		h.rqMu.Lock()
		list := h.requeue
		h.requeue, h.spare = h.spare[:0], list
		h.rqMu.Unlock()
		for i, r := range list {
			list[i] = nil
			r.err, r.Err = nil, nil
			if err := h.dispatch(h.ctx, r, false); err != nil {
				if errors.Is(err, context.Canceled) {
					err = ErrControllerClosed
				}
				r.Err = err
				h.finish(r)
			}
		}
		h.rqMu.Lock()
		waiting := len(h.requeue) > 0
		h.rqMu.Unlock()
		poll = nil
		if waiting {
			t.Reset(requeuePoll)
			poll = t.C
		}
	}
}

// close refuses new I/O and fails the requeued I/O.
func (h *Head) close() {
	h.closed.Store(true)
	h.cancel()
	<-h.rqDone
}

// isPathError reports whether err is one a multipath request fails over
// on (nvme_is_path_error, a path that is down or given up).
func isPathError(err error) bool {
	if errors.Is(err, ErrPathDown) || errors.Is(err, ErrControllerLost) || errors.Is(err, ErrControllerClosed) {
		return true
	}
	var st nvmeof.Status
	return errors.As(err, &st) && st.SCT() == nvmeof.SCTPath && !st.DNR()
}

// isANAError is nvme_is_ana_error: ANA Persistent Loss, Inaccessible or
// Transition.
func isANAError(err error) bool {
	var st nvmeof.Status
	if !errors.As(err, &st) {
		return false
	}
	switch st.Code() {
	case nvmeof.StatusANAPersistentLoss, nvmeof.StatusANAInaccessible, nvmeof.StatusANATransition:
		return true
	}
	return false
}

// do runs a request and waits for it.
func (h *Head) do(ctx context.Context, op Op, off int64, p []byte, length int64) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var s *syncReq
	if v := h.pool.Get(); v != nil {
		s = v.(*syncReq)
	} else {
		s = &syncReq{ch: make(chan struct{}, 1)}
		s.Done = s.signal
	}
	s.Op, s.Offset, s.Data, s.Length, s.FUA = op, off, p, length, false
	err := h.Submit(ctx, &s.Request)
	if err == nil {
		<-s.ch
		err = s.Err
	}
	s.Data = nil
	s.Err = nil
	h.pool.Put(s)
	return err
}

// ReadAt reads len(p) bytes at byte offset off (io.ReaderAt), as
// Namespace.ReadAt.
func (h *Head) ReadAt(p []byte, off int64) (int, error) {
	return h.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt with a context that bounds the wait for command
// slots.
func (h *Head) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	size := h.size.Load()
	if off >= size && off >= 0 {
		return 0, io.EOF
	}
	var eof error
	if off >= 0 && off+int64(len(p)) > size {
		p, eof = p[:size-off], io.EOF
	}
	if err := h.do(ctx, OpRead, off, p, 0); err != nil {
		return 0, err
	}
	return len(p), eof
}

// WriteAt writes p at byte offset off (io.WriterAt), as
// Namespace.WriteAt.
func (h *Head) WriteAt(p []byte, off int64) (int, error) {
	return h.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt with a context that bounds the wait for
// command slots.
func (h *Head) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := h.do(ctx, OpWrite, off, p, 0); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush commits the volatile write cache of the path it is sent on.
func (h *Head) Flush(ctx context.Context) error { return h.do(ctx, OpFlush, 0, nil, 0) }

// WriteZeroes zeroes n bytes at byte offset off.
func (h *Head) WriteZeroes(ctx context.Context, off, n int64) error {
	return h.do(ctx, OpWriteZeroes, off, nil, n)
}

// Discard deallocates n bytes at byte offset off.
func (h *Head) Discard(ctx context.Context, off, n int64) error {
	return h.do(ctx, OpDiscard, off, nil, n)
}
