package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/internal/tcpopt"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// server is the running target behind Target: ports, subsystems with their
// namespaces, controllers, and the worker pool.
//
// Locking: opMu serializes Start, Reload and Shutdown. regMu guards the
// configuration view that Connect and the discovery log read (cfg, ports,
// subsystems, each port's cfg, each subsystem's cfg); it is held for
// writing only for in-memory swaps, never across I/O, so that the engine
// goroutines that take it for reading never wait long. Then come, in this
// order, subsystem.mu, controller.mu, queue.mu and port.mu.
type server struct {
	log      *zap.Logger
	firmware string

	// guard is set once when the target becomes a gateway's
	// (SetGatewayGuard): start, reload and apply check it.
	guard atomic.Pointer[GatewayGuard]
	// serveUntil is each ANA group's serving deadline in Unix
	// nanoseconds (0: none; SetServingDeadline).
	serveUntil [MaxANAGroup + 1]atomic.Int64
	opMu       sync.Mutex
	// applies counts the swaps (apply) and configuration changes under
	// opMu: a reopen prepared outside opMu is applied only if none came
	// in between (prepareReopen).
	applies   uint64
	started   bool
	stopped   bool
	startedAt time.Time
	// phase mirrors started/stopped for Status and Healthy, which must not
	// wait for a Reload or Shutdown in progress: phaseNew, phaseRunning,
	// phaseStopped. startedAt is written before phaseRunning is stored.
	phase atomic.Int32

	regMu      sync.RWMutex
	cfg        *Config
	ports      map[uint16]*port
	subsystems map[string]*subsystem
	disc       *subsystem
	// authKeys are the hosts' DH-HMAC-CHAP keys (config_auth.go),
	// replaced by reloads.
	authKeys atomic.Pointer[authKeys]

	// anaForced are the ANA groups whose state SetGroupANA set, on
	// every port (copied on write under anaMu; read by port.setANA).
	anaForced atomic.Pointer[map[uint32]nvmeof.ANAState]
	anaMu     sync.Mutex
	// anaChange is the ANA change count (CHGCNT of the ANA log), bumped on
	// every ANA state change.
	anaChange atomic.Uint64
	// logPageBuilt, if set (by this package's tests only, before Start),
	// is called on the admin queue's goroutine right after a Get Log
	// Page built its page: a test scripts what happens in between.
	logPageBuilt atomic.Pointer[func(c *controller, lid uint8)]
	// backendOpening, if set (by this package's tests only), is called
	// right before a namespace's backend opens: a test holds an open there
	// as a slow rbd open would be held by the cluster.
	backendOpening atomic.Pointer[func(nqn string, cfg NamespaceConfig)]

	// genctr is the discovery log generation counter, bumped on every
	// change a discovery log may show.
	genctr atomic.Uint64
	// peers are the other gateways' ports the discovery log lists
	// (SetPeerPorts), sorted; guarded by regMu.
	peers []PeerPort
	// advertised are the addresses the own discovery log entries give
	// for a port (SetAdvertisedAddresses); guarded by regMu.
	advertised map[uint16]netip.Addr

	shared   *workerPool
	stopping atomic.Bool
	// timed: a metrics collector exists (MetricsCollector), so commands
	// and backend calls are timed for its latency histograms; without
	// one the data path reads no clock.
	timed atomic.Bool

	// adm caps the connections of every port (LimitsConfig); hostUse the
	// controllers and queues of each host; drains remembers controllers
	// gone with commands still running (a new association of their host
	// waits for them).
	adm     *rdma.Admission
	hostUse hostUsage
	drains  drainRegistry
	// drainWaits counts admin Connects waiting for a previous
	// association's commands.
	drainWaits atomic.Int64

	bg       sync.WaitGroup // background goroutines (housekeeping, flushes)
	hkCancel context.CancelFunc

	// quit is closed when Shutdown begins, before it takes opMu: a reload
	// waiting for namespaces to drain gives up at once, so Shutdown never
	// waits behind it. drainTimeout bounds a reload's drains (DrainTimeout).
	quit         chan struct{}
	quitOnce     sync.Once
	drainTimeout time.Duration

	lastCompleted atomic.Uint64
	lastCheck     atomic.Int64

	// hooks are the test hooks (SetTestHooks, before start; nil in
	// production).
	hooks *TestHooks

	// met holds the metrics' totals and events (metrics.go).
	met *metricsState
	// traces is the wire trace (trace.go).
	traces traceState
}

// Values of server.phase.
const (
	phaseNew = iota
	phaseRunning
	phaseStopped
)

// newServer prepares a server for a validated configuration with defaults
// applied. It opens nothing.
func newServer(cfg *Config, log *zap.Logger) *server {
	return &server{
		log: log, firmware: DefaultFirmwareRevision, cfg: cfg,
		ports: map[uint16]*port{}, subsystems: map[string]*subsystem{}, disc: newDiscoverySubsystem(),
		quit: make(chan struct{}), drainTimeout: DrainTimeout, met: newMetricsState(),
	}
}

// start opens the backends and the listeners.
func (s *server) start(ctx context.Context) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.started {
		return errors.New("target: already started")
	}
	cfg := s.cfg
	if err := s.checkGuard(cfg); err != nil {
		return err
	}
	keys, err := loadAuthKeys(cfg)
	if err != nil {
		return fmt.Errorf("target: start: %w", err)
	}
	s.authKeys.Store(&keys)
	s.shared = newWorkerPool(cfg.Tuning.IOWorkers, s.execIO)
	s.adm = rdma.NewAdmission(admissionLimits(cfg), s.log)
	s.startedAt = time.Now()
	s.genctr.Store(1)
	for i := range cfg.Subsystems {
		sc := &cfg.Subsystems[i]
		sub := newSubsystem(sc)
		sub.ns.Store(newNSTable(s.openNamespaces(cfg, sc.NQN, sc.Namespaces, nil)))
		// status (the control socket, served while the target starts)
		// reads the registry under regMu.
		s.regMu.Lock()
		s.subsystems[sc.NQN] = sub
		s.regMu.Unlock()
	}
	var errs []error
	for i := range cfg.Ports {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		pc := cfg.Ports[i]
		p := newPort(s, pc)
		s.regMu.Lock()
		s.ports[pc.ID] = p
		s.regMu.Unlock()
		cc, err := s.controllerConfig(cfg, &pc)
		if err == nil {
			err = p.listen(pc, cc)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d (%s): %w", pc.ID, pc.ListenAddress(), err))
		}
	}
	if len(errs) > 0 {
		s.closeAll(nil)
		return fmt.Errorf("target: start: %w", errors.Join(errs...))
	}
	s.started = true
	s.phase.Store(phaseRunning)
	s.lastCheck.Store(time.Now().UnixNano())
	hctx, cancel := context.WithCancel(context.Background())
	s.hkCancel = cancel
	s.bg.Add(1)
	go s.housekeeping(hctx)
	for _, p := range s.sortedPorts() {
		s.log.Info("port listening", zap.Uint16("port_id", p.id), zap.String("address", p.cfg.ListenAddress()), zap.Strings("subsystems", p.cfg.Subsystems))
	}
	if err := s.syncWritable(); err != nil {
		s.log.Error("namespaces that cannot take their image's exclusive lock", zap.Error(err))
	}
	return nil
}

// openNamespaces opens the backends of a subsystem's namespaces, as
// configured in cfg; deferClaim lists the NSIDs to open without their
// claim (backend.Config.DeferClaim).
func (s *server) openNamespaces(cfg *Config, nqn string, list []NamespaceConfig, deferClaim map[uint32]bool) []*namespace {
	out := make([]*namespace, 0, len(list))
	for _, nc := range list {
		ns := s.openNamespace(namespaceField(cfg, nqn, nc.NSID), nqn, nc, deferClaim[nc.NSID])
		s.guardNamespace(ns)
		lf := []zap.Field{zap.String("subsystem", nqn), zap.Uint32("nsid", nc.NSID), zap.String("backend", nc.Backend.Kind), zap.String("path", nc.Backend.Path)}
		switch ns.state {
		case NamespaceFailed:
			s.log.Warn(ns.field+": "+ns.err+": namespace failed to open; hosts do not see it (retried on every reload)",
				append(lf, zap.String("field", ns.field), zap.String("error", ns.err))...)
		case NamespaceOnline:
			s.log.Info("namespace online", append(lf, zap.Int64("size", ns.be.Size()), zap.Uint32("block_size", ns.be.BlockSize()), zap.Bool("read_only", ns.readOnly))...)
		}
		out = append(out, ns)
	}
	return out
}

// listenConfig is the binding configuration of a port: the one of its
// transport is used.
type listenConfig struct {
	rdma rdma.ControllerConfig
	tcp  tcp.Config
}

// controllerConfig is the binding configuration of a port.
func (s *server) controllerConfig(cfg *Config, pc *PortConfig) (listenConfig, error) {
	tun := &cfg.Tuning
	tc, err := cfg.Transport.RDMA()
	if err != nil {
		return listenConfig{}, err
	}
	tcpOpts, err := portTCPOptions(tc.TCP, pc)
	if err != nil {
		return listenConfig{}, err
	}
	if pc.IsTCP() {
		// The connect timeout bounds the ICReq and the Connect as it
		// bounds the MPA exchange and the Connect on RDMA; a stalled PDU
		// and a blocked write get the transport's write timeout. The
		// connections of TCP ports enter the daemon's one Admission, as
		// those of RDMA ports do: limits.max_pending,
		// max_pending_per_address and max_connections count them all.
		return listenConfig{tcp: tcp.Config{
			InlineDataSize:  pc.InlineDataSize,
			MaxQueueSize:    pc.MaxQueueSize,
			MaxTransferSize: int(tun.MaxTransferBytes()),
			ConnectTimeout:  cfg.Transport.ConnectTimeout,
			PDUTimeout:      cfg.Transport.WriteTimeout,
			WriteTimeout:    cfg.Transport.WriteTimeout,
			Admission:       s.adm.Shared(),
			BusyPoll:        cfg.Transport.BusyPoll,
			TCP:             tcpOpts,
			Logger:          s.log,
		}}, nil
	}
	tc.Admission = s.adm
	tc.TCP = tcpOpts
	return listenConfig{rdma: rdma.ControllerConfig{
		Transport:       tc,
		InlineDataSize:  pc.InlineDataSize,
		MaxQueueSize:    pc.MaxQueueSize,
		MaxTransferSize: int(tun.MaxTransferBytes()),
		IOPoolSize:      int(tun.BufferPoolBytes()),
		Logger:          s.log,
	}}, nil
}

// portTCPOptions are the socket options of port pc's connections, on
// either transport (issue 26): the transport section's
// (transport.tcp_congestion, tcp_notsent_lowat; probed when it was
// parsed), with the port's tcp_congestion over them (probed here).
func portTCPOptions(o tcpopt.Options, pc *PortConfig) (tcpopt.Options, error) {
	if pc.TCPCongestion == "" {
		return o, nil
	}
	o.Congestion = pc.TCPCongestion
	if err := o.Probe(); err != nil {
		return o, &FieldError{Field: fmt.Sprintf("ports[%d].tcp_congestion", pc.ID), Reason: err.Error(), Err: err}
	}
	return o, nil
}

// keepAliveTimeout applies the configured keep-alive limits to a KATO.
func (s *server) keepAliveTimeout(kato uint32, disc bool) time.Duration {
	s.regMu.RLock()
	tun := s.cfg.Tuning
	s.regMu.RUnlock()
	return keepAliveTimeout(kato, &tun, disc)
}

// connectTimeout is transport.connect_timeout.
func (s *server) connectTimeout() time.Duration {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return s.cfg.Transport.ConnectTimeout
}

// goFlush flushes a subsystem's namespaces in the background, then calls
// done (controller shutdown notification).
func (s *server) goFlush(sub *subsystem, done func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		flushAll(sub)
		done()
	}()
}

// housekeeping samples backend health every Tuning.HealthInterval and the
// controller busy time every second.
func (s *server) housekeeping(ctx context.Context) {
	defer s.bg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastHealth := time.Now() // sampled when the backends opened
	for {
		now := time.Now()
		s.regMu.RLock()
		interval := s.cfg.Tuning.HealthInterval
		subs := make([]*subsystem, 0, len(s.subsystems))
		for _, sub := range s.subsystems {
			subs = append(subs, sub)
		}
		s.regMu.RUnlock()
		sampleHealth := now.Sub(lastHealth) >= interval
		if sampleHealth {
			lastHealth = now
		}
		for _, sub := range subs {
			tab := sub.ns.Load()
			for _, id := range tab.active {
				ns := tab.byID[id]
				if ns.ref.Load()&^refClosing > 0 {
					ns.busySeconds.Add(1)
				}
				if sampleHealth && ns.tryGet() {
					ns.sampleHealth(now)
					ns.put()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sortedPorts returns the ports by ID. The caller holds regMu or opMu.
func (s *server) sortedPorts() []*port {
	list := make([]*port, 0, len(s.ports))
	for _, p := range s.ports {
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b *port) int { return int(a.id) - int(b.id) })
	return list
}

// allQueues returns every queue of every port.
func (s *server) allQueues() []*queue {
	s.regMu.RLock()
	ports := s.sortedPorts()
	s.regMu.RUnlock()
	var list []*queue
	for _, p := range ports {
		list = append(list, p.queueList()...)
	}
	return list
}

// allControllers returns every controller, discovery ones last.
func (s *server) allControllers() []*controller {
	s.regMu.RLock()
	subs := make([]*subsystem, 0, len(s.subsystems))
	for _, sc := range s.cfg.Subsystems {
		if sub := s.subsystems[sc.NQN]; sub != nil {
			subs = append(subs, sub)
		}
	}
	s.regMu.RUnlock()
	var list []*controller
	for _, sub := range append(subs, s.disc) {
		list = append(list, sub.controllers()...)
	}
	return list
}

// shutdown stops the target gracefully (see Target.Shutdown).
func (s *server) shutdown(ctx context.Context) error {
	s.quitOnce.Do(func() { close(s.quit) })
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if !s.started || s.stopped {
		return nil
	}
	s.stopped = true
	s.phase.Store(phaseStopped)
	s.log.Info("shutting down")
	// No new connections, no new commands: commands that arrive now are
	// left unanswered, and the host retries them when it reconnects.
	s.stopping.Store(true)
	for _, p := range s.sortedPorts() {
		p.stopListening("shut down")
	}
	var errs []error
	// Commands in flight finish (their writes are acknowledged).
	tick := time.NewTicker(time.Millisecond)
	for s.inflight() > 0 {
		select {
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("target: shutdown: %d commands still in flight: %w", s.inflight(), ctx.Err()))
		case <-tick.C:
			continue
		}
		break
	}
	tick.Stop()
	// Every acknowledged write reaches stable storage before the hosts are
	// told anything.
	for _, sub := range s.subsystemList() {
		tab := sub.ns.Load()
		for _, id := range tab.active {
			ns := tab.byID[id]
			if err := ns.be.Flush(); err != nil && !s.fencedAway(ns, err) {
				errs = append(errs, fmt.Errorf("target: flush namespace %d of %s: %w", ns.nsid, sub.nqn, err))
			}
		}
	}
	errs = append(errs, s.closeAll(ctx.Done()))
	s.log.Info("shut down")
	return errors.Join(errs...)
}

// fencedAway reports whether err, from flushing or closing namespace ns at
// shutdown, is the expected end of a group this gateway handed over: ns's
// RADOS client is blocklisted (EBLOCKLISTED is ESHUTDOWN) and a gateway
// made its ANA group inaccessible here (SetGroupANA): the group's new
// holder fenced this gateway's clients of it before serving, as every
// hand-over does (docs/rbd.md, "Gateway group"). Nothing is lost: the
// group's commands completed before its release or step-down, and a
// gateway's rbd namespaces write through (no cache: the gateway guard
// refuses rbd_cache), so every acknowledged write is on the OSDs; a
// clean stop of such a gateway (a rolling upgrade after a drain) is
// clean. It is logged.
func (s *server) fencedAway(ns *namespace, err error) bool {
	if !errors.Is(err, syscall.ESHUTDOWN) {
		return false
	}
	f := s.anaForced.Load()
	if f == nil {
		return false
	}
	if st, ok := (*f)[ns.cfg.ANAGroup]; !ok || st != nvmeof.ANAInaccessible {
		return false
	}
	s.log.Info("shutdown: namespace of an ANA group another gateway holds: its client was fenced by the new holder, not flushed here",
		zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid), zap.Uint32("ana_group", ns.cfg.ANAGroup), zap.Error(err))
	return true
}

// inflight is the number of commands being executed on all queues.
func (s *server) inflight() int64 {
	var n int64
	for _, q := range s.allQueues() {
		n += q.inflight.Load()
	}
	return n
}

func (s *server) subsystemList() []*subsystem {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	list := make([]*subsystem, 0, len(s.subsystems))
	for _, sub := range s.subsystems {
		list = append(list, sub)
	}
	return list
}

// closeAll disconnects every queue and controller, closes the backends
// (flushing them) and stops the workers. deadline bounds the waits; nil
// waits as long as needed.
func (s *server) closeAll(deadline <-chan struct{}) error {
	s.stopping.Store(true)
	ports := s.sortedPorts()
	for _, p := range ports {
		p.shut("shut down")
	}
	for _, c := range s.allControllers() {
		c.teardown("target shut down")
	}
	// Wait for the connections to end (their goroutines exit).
	for _, p := range ports {
		for _, q := range p.queueList() {
			if conn := q.conn.Load(); conn != nil {
				select {
				case <-conn.Done():
				case <-deadline:
				}
			}
		}
	}
	var errs []error
	for _, sub := range s.subsystemList() {
		for _, ns := range sub.ns.Load().byID {
			if err := ns.close(deadline); err != nil && !s.fencedAway(ns, err) {
				errs = append(errs, err)
			}
		}
	}
	if s.hkCancel != nil {
		s.hkCancel()
	}
	// Background work (flushes after a controller shutdown, retired
	// namespaces closing) ends within the deadline too.
	bgDone := make(chan struct{})
	go func() {
		s.bg.Wait()
		close(bgDone)
	}()
	select {
	case <-bgDone:
	case <-deadline:
		errs = append(errs, errors.New("target: background flushes or closes still running at the deadline"))
	}
	if s.shared != nil {
		s.shared.close()
	}
	if s.adm != nil {
		s.adm.Close()
	}

	return errors.Join(errs...)
}

// healthy reports whether every port accepts and the workers make
// progress.
func (s *server) healthy() error {
	phase := s.phase.Load()
	started, stopped := phase != phaseNew, phase == phaseStopped
	if !started {
		return errors.New("target: not started")
	}
	if stopped {
		return errors.New("target: shut down")
	}
	s.regMu.RLock()
	ports := s.sortedPorts()
	s.regMu.RUnlock()
	for _, p := range ports {
		if ok, why := p.status(); !ok {
			return fmt.Errorf("target: port %d is not listening: %s", p.id, why)
		}
	}
	// The workers are stuck if commands wait and none was taken since the
	// previous check, at least 30 s ago.
	now := time.Now().UnixNano()
	done := s.shared.taken.Load()
	if s.shared.queued() > 0 && done == s.lastCompleted.Load() && now-s.lastCheck.Load() > int64(30*time.Second) {
		return fmt.Errorf("target: I/O workers made no progress in %s with %d commands waiting", time.Duration(now-s.lastCheck.Load()).Round(time.Second), s.shared.queued())
	}
	if done != s.lastCompleted.Load() || s.shared.queued() == 0 {
		s.lastCompleted.Store(done)
		s.lastCheck.Store(now)
	}
	return nil
}

// healthReport returns a block namespace's device health report.
func (s *server) healthReport(nqn string, nsid uint32) (string, error) {
	s.regMu.RLock()
	sub := s.subsystems[nqn]
	s.regMu.RUnlock()
	if sub == nil {
		return "", fmt.Errorf("target: no subsystem %s", nqn)
	}
	ns := sub.ns.Load().byID[nsid]
	if ns == nil {
		return "", fmt.Errorf("target: subsystem %s has no namespace %d", nqn, nsid)
	}
	if !ns.online() || !ns.tryGet() {
		return "", fmt.Errorf("target: namespace %d of %s is %s", nsid, nqn, ns.state)
	}
	defer ns.put()
	hr, ok := ns.be.(backend.HealthReporter)
	if !ok {
		return "", fmt.Errorf("target: namespace %d of %s is a %s backend, not a block device: %w", nsid, nqn, ns.info.Kind, backend.ErrNotSupported)
	}
	return hr.HealthReport()
}

// status builds the administrators' snapshot.
func (s *server) status() Status {
	phase := s.phase.Load()
	started, stopped := phase != phaseNew, phase == phaseStopped
	running := started && !stopped
	var st Status
	if started {
		st.StartedAt = s.startedAt
	}
	s.regMu.RLock()
	cfg := s.cfg
	for i := range cfg.Ports {
		pc := &cfg.Ports[i]
		ps := PortStatus{
			ID: pc.ID, Address: pc.ListenAddress(), Family: familyName(pc.AdrFam()),
			Subsystems: cloneSlice(pc.Subsystems), InlineDataSize: pc.InlineDataSize, MaxQueueSize: pc.MaxQueueSize, Transport: pc.Transport,
		}
		for _, r := range pc.Referrals {
			ps.Referrals = append(ps.Referrals, r.ListenAddress())
		}
		if p := s.ports[pc.ID]; p != nil && running {
			ps.Listening, ps.Error = p.status()
			ps.Connections = len(p.queueList())
		} else {
			ps.Error = "not started"
			if stopped {
				ps.Error = "shut down"
			}
		}
		st.Ports = append(st.Ports, ps)
	}
	var subs []*subsystem
	for i := range cfg.Subsystems {
		sc := &cfg.Subsystems[i]
		ss := SubsystemStatus{
			NQN: sc.NQN, Serial: sc.Serial, Model: sc.Model, FirmwareRevision: sc.FirmwareRevision,
			AllowAnyHost: sc.AllowAnyHost, AllowedHosts: cloneSlice(sc.AllowedHosts),
		}
		sub := s.subsystems[sc.NQN]
		subs = append(subs, sub)
		var tab *nsTable
		if sub != nil && running {
			tab = sub.ns.Load()
			ss.Controllers = len(sub.controllers())
		}
		for j := range sc.Namespaces {
			nc := &sc.Namespaces[j]
			bc, _ := nc.BackendConfig()
			ns := NamespaceStatus{
				NSID: nc.NSID, Enabled: nc.IsEnabled(), State: NamespaceStopped, ANAGroup: nc.ANAGroup,
				NGUID: nc.NGUID, UUID: nc.UUID, EUI64: nc.EUI64,
				Backend: BackendStatus{
					Kind: nc.Backend.Kind, Path: nc.Backend.Path, Size: bc.Size, BlockSize: bc.BlockSize,
					ReadOnly: nc.Backend.ReadOnly, Direct: nc.Backend.Direct,
				},
			}
			if !nc.IsEnabled() {
				ns.State = NamespaceDisabled
			}
			if tab != nil {
				if rt := tab.byID[nc.NSID]; rt != nil {
					ns.State, ns.Error = rt.state, rt.err
					if rt.state == NamespaceFailed {
						ns.Field = rt.field
					}
					ns.IO = rt.ioCounters()
					if rt.online() {
						ns.NGUID, ns.UUID, ns.EUI64 = idStrings(rt.ids)
						ns.Backend.Size = rt.info.Size
						ns.Backend.BlockSize = rt.info.BlockSize
						ns.Backend.ReadOnly = rt.readOnly
						ns.Backend.Direct = rt.info.Direct
						ns.Backend.Bus, ns.Backend.Model, ns.Backend.Serial = rt.info.Bus, rt.info.Model, rt.info.Serial
						if h := rt.health.Load(); h != nil {
							ns.Backend.Health = *h
						}
						ns.Backend.Stats = rt.backendStats()
					}
				}
			}
			ss.Namespaces = append(ss.Namespaces, ns)
		}
		st.Subsystems = append(st.Subsystems, ss)
	}
	s.regMu.RUnlock()
	if !running {
		return st
	}
	for _, sub := range append(subs, s.disc) {
		if sub == nil {
			continue
		}
		for _, c := range sub.controllers() {
			st.Controllers = append(st.Controllers, c.status())
		}
	}
	return st
}

// status is the controller's line in Status.
func (c *controller) status() ControllerStatus {
	cs := ControllerStatus{
		CNTLID: c.cntlid, Subsystem: c.sub.nqn, Discovery: c.sub.disc, HostNQN: c.hostNQN,
		PortID: c.port.id, KATOMillis: uint32(c.ka.get() / time.Millisecond), ConnectedAt: c.created,
		IO: c.ioCounters(),
	}
	if c.hostID != ([16]byte{}) {
		cs.HostID = nvmeof.FormatUUID(c.hostID)
	}
	c.mu.Lock()
	if q := c.queues[0]; q != nil {
		cs.RemoteAddress, cs.LocalAddress = addrString(q.remote), addrString(q.local)
	}
	cs.IOQueues = c.ioQueues
	if c.ioQueues > 0 {
		cs.QueueSize = c.ioSize
	}
	c.mu.Unlock()
	return cs
}

// adminLocal is the local address of the admin queue.
func (c *controller) adminLocal() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[0]; q != nil {
		return q.local
	}
	return nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
