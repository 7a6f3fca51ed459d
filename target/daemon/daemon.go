package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// targetService is what the daemon needs of the target (*target.Target
// implements it); the daemon's tests use a fake.
type targetService interface {
	Start(ctx context.Context) error
	Reload(cfg *target.Config) error
	Shutdown(ctx context.Context) error
	Status() target.Status
	Healthy() error
	HealthReport(nqn string, nsid uint32) (string, error)
	Queues() []target.QueueStatus
	ReopenNamespaces(anaGroup uint32, swap sync.Locker) error
	SetGroupANA(anaGroup uint32, st nvmeof.ANAState) error
}

// newTargetService creates the target; tests replace it.
var newTargetService = func(cfg *target.Config, log *zap.Logger) (targetService, error) {
	return target.New(cfg, log)
}

// Daemon states, as `nvmetd status` shows them.
const (
	stateStarting  = "starting"
	stateRunning   = "running"
	stateReloading = "reloading"
	stateStopping  = "stopping"
)

// daemon runs the target: it starts it, handles signals (SIGHUP reload,
// SIGTERM/SIGINT drain and stop), talks to systemd (readiness, reload and
// stop notifications, watchdog), serves the control socket and watches
// backend health.
type daemon struct {
	log   *zap.Logger
	level zap.AtomicLevel
	// load re-reads the configuration (for SIGHUP).
	load func() (*loadedConfig, error)
	// notify sends an sd_notify(3) message.
	notify func(state string)
	// signals delivers SIGHUP, SIGTERM and SIGINT.
	signals <-chan os.Signal
	// watchdog is systemd's WatchdogSec (0: off); the daemon pings every
	// half of it while the target is healthy.
	watchdog time.Duration

	t        targetService
	stopping atomic.Bool
	// gw is the gateway (nil without a gateway section); set before the
	// target is created, never changed.
	gw *gwtarget.Gateway

	// changeMu serializes reloads (SIGHUP) and the management API's
	// changes: each works from the configuration the previous one left.
	changeMu changeLock

	// metrics is the Prometheus endpoint (nil when off).
	metricsMu sync.Mutex
	metrics   *metricserve.Server

	mu         sync.Mutex
	cur        *loadedConfig
	state      string
	startedAt  time.Time
	lastReload *reloadInfo
	// appliedAt is when the configuration file was last applied in full:
	// the start, or the last successful reload.
	appliedAt time.Time
	// lastChange is the management API's last change; unsaved is set
	// while the running configuration has changes the file lacks.
	lastChange *reloadInfo
	unsaved    bool
	// logLevelSet is set when the management API changed the log level
	// (then saving writes daemon.log_level; a level from a flag or the
	// environment is not written into the file).
	logLevelSet bool
}

// changeLock is a mutex that counts the goroutines waiting for it: status
// shows how many reloads and changes are queued (pending_changes).
type changeLock struct {
	mu      sync.Mutex
	waiters atomic.Int32
}

// Lock waits for the lock.
func (l *changeLock) Lock() {
	l.waiters.Add(1)
	l.mu.Lock()
	l.waiters.Add(-1)
}

// Unlock releases it.
func (l *changeLock) Unlock() { l.mu.Unlock() }

// sdNotify sends state to systemd if NOTIFY_SOCKET is set.
func sdNotify(log *zap.Logger) func(string) {
	return func(state string) {
		if _, err := sddaemon.SdNotify(false, state); err != nil {
			log.Warn("sd_notify failed", zap.String("state", state), zap.Error(err))
		}
	}
}

// run runs the daemon until SIGTERM or SIGINT and returns the exit code.
func (d *daemon) run() int {
	cfg := d.config()
	d.setState(stateStarting)
	if err := d.prepareDefaultImage(cfg); err != nil {
		d.log.Error("cannot create the default namespace", zap.Error(err))
		return exitFailure
	}
	// A start that fails (the port cannot be bound, the control socket is
	// taken, ...) removes the default image it created: nothing was served
	// from it, and a 1 GiB file left in the data directory by a failed
	// first start is litter (issue 23.14). An image a previous start made
	// is never touched.
	started := false
	defer func() {
		if started || !cfg.DefaultImageCreated {
			return
		}
		if err := os.Remove(cfg.DefaultImage); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("the start failed; cannot remove the default namespace image it created", zap.String("path", cfg.DefaultImage), zap.Error(err))
			return
		}
		d.log.Info("the start failed: removed the default namespace image it created", zap.String("path", cfg.DefaultImage))
	}()
	for _, w := range cfg.Warnings {
		d.log.Warn("configuration: " + w)
	}
	if cfg.Gateway != nil && !gateway.Built {
		// Refused before anything starts: a restart would not help.
		d.log.Error("gateway: cannot join the group", zap.Error(gateway.ErrRADOSNotBuilt))
		return exitConfig
	}
	if cfg.Gateway != nil {
		// The target starts with every gateway group inaccessible; the
		// gateway makes the groups it takes optimized.
		d.gw = gwtarget.New(cfg.Gateway)
		if d.gw.RADOSHeld() {
			// The group's configuration is the stored version's (the
			// file's subsystems and hosts only seed version 1).
			merged, err := d.gw.Bootstrap(cfg.Target, d.applyGroup, d.log)
			if err != nil {
				d.log.Error("gateway: cannot read the group's configuration", zap.Error(err))
				if errors.Is(err, gateway.ErrLegacyConfig) {
					return exitConfig // a restart would not help
				}
				return exitFailure
			}
			lc := *cfg
			lc.Target = merged
			lc.Warnings = append(merged.Warnings(), unknownEnv(os.Environ())...)
			d.mu.Lock()
			d.cur = &lc
			d.mu.Unlock()
			cfg = &lc
		}
	}
	t, err := newTargetService(d.targetConfig(cfg.Target), d.log.Named("target"))
	if err != nil {
		d.log.Error("cannot create the target", zap.Error(err))
		return exitFailure
	}
	d.t = t

	l, err := listenControl(cfg.Daemon.ControlSocket)
	if err != nil {
		d.log.Error("cannot serve the control socket", zap.Error(err))
		return exitFailure
	}
	cs := serveControl(l, d.snapshot, d.log, func(m *http.ServeMux) { d.mgmtRoutes(m) }, d.traceRoutes, d.reloadRoutes)
	defer cs.close()

	ms, err := d.startMetrics(cfg.Target.Metrics)
	if err != nil {
		d.log.Error("cannot serve the metrics endpoint", zap.Error(err))
		return exitFailure
	}
	d.metrics = ms
	defer d.stopMetrics()

	// Start, while still answering signals: SIGTERM aborts the start,
	// SIGHUP is applied once running.
	startCtx, cancelStart := context.WithCancel(context.Background())
	startErr := make(chan error, 1)
	go func() { startErr <- t.Start(startCtx) }()
	reloadPending := false
starting:
	for {
		select {
		case err := <-startErr:
			cancelStart()
			if err != nil {
				d.log.Error("target failed to start", zap.Error(err))
				return exitFailure
			}
			break starting
		case s := <-d.signals:
			if s == syscall.SIGHUP {
				reloadPending = true
				continue
			}
			d.log.Info("signal during start-up: aborting the start", zap.Stringer("signal", s))
			cancelStart()
			if err := <-startErr; err != nil {
				d.log.Info("start aborted", zap.Error(err))
				return exitOK
			}
			return d.shutdown(s)
		}
	}

	if d.gw != nil {
		if err := d.gw.Start(d.t, func() *target.Config { return d.config().Target }, &d.changeMu, cfg.Target, d.log); err != nil {
			d.log.Error("gateway: cannot join the group", zap.Error(err))
			d.stopTarget(5 * time.Second)
			if errors.Is(err, gateway.ErrRADOSNotBuilt) {
				return exitConfig // a restart would not help
			}
			return exitFailure
		}
		defer d.gw.Stop()
	}
	started = true

	d.mu.Lock()
	d.startedAt = time.Now()
	d.appliedAt = d.startedAt
	d.state = stateRunning
	d.mu.Unlock()
	d.logReady(cfg)
	d.notify("READY=1\nSTATUS=" + d.statusLine())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if d.watchdog > 0 {
		wg.Go(func() { d.runWatchdog(ctx) })
	}
	wg.Go(func() { d.monitorHealth(ctx) })

	if reloadPending {
		d.reload()
	}
	gwDone := d.gw.Done()
	for {
		select {
		case s, ok := <-d.signals:
			if !ok {
				return exitOK
			}
			switch s {
			case syscall.SIGHUP:
				d.reload()
			case syscall.SIGTERM, syscall.SIGINT:
				d.gw.Stop()
				return d.shutdown(s)
			}
		case err := <-gwDone:
			// Fenced by another gateway: every RADOS client of this
			// process is blocklisted. Or a group could not be made
			// inaccessible for a lease (gateway.ErrStepDownFailed): its
			// ports may still say optimized, and only the process's end
			// closes them (the next holder fences this gateway). Stop
			// serving and exit so that the supervisor restarts it with
			// fresh clients.
			if errors.Is(err, gateway.ErrStepDownFailed) {
				d.log.Error("gateway: a group could not be made inaccessible; stopping the target and exiting (the next holder fences this gateway)", zap.Error(err))
			} else {
				d.log.Error("gateway: fenced; stopping the target and exiting for a restart with new RADOS clients", zap.Error(err))
			}
			d.stopping.Store(true)
			d.setState(stateStopping)
			d.gw.Fenced()
			d.stopTarget(5 * time.Second)
			return exitFenced
		}
	}
}

// targetConfig is the configuration the target gets for cfg: cfg with
// the gateway's ANA states (gwtarget.Gateway.Overlay).
func (d *daemon) targetConfig(cfg *target.Config) *target.Config {
	return d.gw.Overlay(cfg.Clone())
}

// stopTarget shuts the target down within d (no drain beyond it).
func (d *daemon) stopTarget(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.t.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			d.log.Warn("target shutdown", zap.Error(err))
		}
	case <-time.After(timeout + 5*time.Second):
		d.log.Error("the target did not stop in time")
	}
}

// config returns the configuration in effect.
func (d *daemon) config() *loadedConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur
}

func (d *daemon) setState(s string) {
	d.mu.Lock()
	d.state = s
	d.mu.Unlock()
}

// prepareDefaultImage creates the built-in default namespace's sparse image
// if the built-in configuration is in use and it is missing.
func (d *daemon) prepareDefaultImage(cfg *loadedConfig) error {
	if cfg.DefaultImage == "" {
		return nil
	}
	created, err := ensureImage(cfg.DefaultImage, cfg.DefaultSize)
	if err != nil {
		return err
	}
	if created {
		cfg.DefaultImageCreated = true
		d.log.Info("created the default namespace image (sparse)",
			zap.String("path", cfg.DefaultImage), zap.String("size", backend.FormatSize(cfg.DefaultSize)))
	}
	keyCreated, err := ensureHostKey(cfg.DefaultHostKey, cfg.DefaultHostNQN)
	if err != nil {
		if created {
			os.Remove(cfg.DefaultImage) // this start made it and serves nothing
			cfg.DefaultImageCreated = false
		}
		return err
	}
	if keyCreated {
		d.log.Info("created the default subsystem's DH-HMAC-CHAP host key (mode 0600)",
			zap.String("path", cfg.DefaultHostKey), zap.String("host", cfg.DefaultHostNQN))
	}
	return nil
}

// statusLine is systemd's STATUS= text.
func (d *daemon) statusLine() string {
	cfg := d.config()
	return fmt.Sprintf("serving %d subsystems on %d ports", len(cfg.Target.Subsystems), len(cfg.Target.Ports))
}

// hostTool is how to run nvmeof: the binary beside this one if there is
// one (bin/ of a checkout after make build), else from PATH.
func hostTool() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "nvmeof")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && filepath.Dir(exe) != "/usr/bin" && filepath.Dir(exe) != "/usr/sbin" {
			return p
		}
	}
	return "nvmeof"
}

// logReady logs what is served, with how to connect: nvmetd's host tool and
// a Linux host (siw) both; then a warning if part of the configuration is
// not served.
func (d *daemon) logReady(cfg *loadedConfig) {
	src := cfg.File
	if src == "" {
		src = "built-in default"
	}
	fields := []zap.Field{zap.String("version", programVersion()), zap.String("config", src),
		zap.String("control_socket", cfg.Daemon.ControlSocket)}
	// The target logs each port and namespace as it opens them.
	if len(cfg.Target.Ports) > 0 && len(cfg.Target.Ports[0].Subsystems) > 0 {
		fields = append(fields, connectHints(cfg)...)
	}
	d.log.Info("nvmetd ready", fields...)
	st := d.t.Status()
	if problems := degradation(&st, ""); len(problems) > 0 {
		d.log.Warn(fmt.Sprintf("degraded: %d parts of the configuration are not served (nvmetd status):\n  %s", len(problems), strings.Join(problems, "\n  ")))
	}
}

// connectHints are the ready line's commands to connect to the first
// port's first subsystem: with nvmetd's host tool and from a Linux host.
// --mkfs is shown only when this start created the default namespace's
// image (a command printed at every start must not format a namespace
// that holds data). The built-in default's key is referred to by its file,
// never printed.
func connectHints(cfg *loadedConfig) []zap.Field {
	p := cfg.Target.Ports[0]
	addr := p.Address
	if p.IsWildcard() {
		addr = "<this host's address>"
	}
	nqn := p.Subsystems[0]
	nvmeof := fmt.Sprintf("%s connect -t rdma -a %s -s %d -n %s", hostTool(), addr, p.ServiceID, nqn)
	linux := fmt.Sprintf("modprobe siw nvme-rdma; rdma link add siw0 type siw netdev IFACE; nvme connect -t rdma -a %s -s %d -n %s", addr, p.ServiceID, nqn)
	if p.IsTCP() {
		// An NVMe/TCP port: any stock Linux host, no siw; nvmeof does not
		// speak NVMe/TCP yet.
		linux = fmt.Sprintf("modprobe nvme-tcp; nvme connect -t tcp -a %s -s %d -n %s", addr, p.ServiceID, nqn)
		if cfg.DefaultHostKey != "" {
			linux += fmt.Sprintf(" --hostnqn %s --dhchap-secret \"$(cat %s)\"", cfg.DefaultHostNQN, cfg.DefaultHostKey)
		}
		return []zap.Field{zap.String("connect_linux", linux)}
	}
	if cfg.DefaultHostKey != "" {
		// nvmeof reads the key file itself when its host NQN is the one
		// the default admits (as root or the daemon's user); saying so
		// keeps the command working with any nvmeof.
		nvmeof += " --dhchap-secret " + dhchapkey.FilePrefix + cfg.DefaultHostKey
		linux += fmt.Sprintf(" --hostnqn %s --dhchap-secret \"$(cat %s)\"", cfg.DefaultHostNQN, cfg.DefaultHostKey)
	}
	fields := []zap.Field{}
	if cfg.DefaultImageCreated {
		fields = append(fields,
			zap.String("connect_nvmeof", nvmeof+" --mount /mnt/nvme --mkfs"),
			zap.String("mkfs", "this start created the namespace: --mkfs formats it; leave it out from now on"))
	} else if cfg.DefaultImage != "" {
		fields = append(fields, zap.String("connect_nvmeof", nvmeof+" --mount /mnt/nvme"))
	} else {
		fields = append(fields, zap.String("connect_nvmeof", nvmeof))
	}
	return append(fields, zap.String("connect_linux", linux))
}

// reload re-reads the configuration and applies it, and returns the
// outcome (also status's last_reload). An invalid configuration is logged
// and the running one kept.
func (d *daemon) reload() *reloadInfo {
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	d.setState(stateReloading)
	// systemd 253+ (Type=notify-reload) wants MONOTONIC_USEC with
	// RELOADING=1; older versions ignore it.
	d.notify("RELOADING=1\n" + strings.TrimSuffix(sddaemon.SdNotifyMonotonicUsec(), "\n"))
	info := &reloadInfo{At: time.Now()}
	defer func() {
		d.mu.Lock()
		d.lastReload = info
		if info.Error == "" {
			d.appliedAt = info.At
		}
		d.state = stateRunning
		d.mu.Unlock()
		d.notify("READY=1\nSTATUS=" + d.statusLine())
	}()
	d.log.Info("SIGHUP: reloading the configuration")
	old := d.config()
	nc, err := d.load()
	if err != nil {
		info.Error = err.Error()
		d.log.Error("reload: configuration rejected, keeping the running one:\n" + err.Error())
		return info
	}
	if d.gw.RADOSHeld() {
		// The file's own parts with the group's configuration that runs.
		nc.Target = d.gw.MergeLocal(nc.Target)
	}
	if err := d.prepareDefaultImage(nc); err != nil {
		info.Error = err.Error()
		d.log.Error("reload: cannot create the default namespace, keeping the running configuration", zap.Error(err))
		return info
	}
	for _, w := range nc.Warnings {
		d.log.Warn("configuration: " + w)
	}
	diff := target.Diff(old.Target, nc.Target)
	info.Changes = diff.Summary()
	for _, c := range info.Changes {
		d.log.Info("reload: " + c)
	}
	err = d.t.Reload(d.targetConfig(nc.Target))
	if !errors.Is(err, target.ErrReloadRefused) {
		if !reflect.DeepEqual(old.Gateway, nc.Gateway) {
			d.log.Warn("reload: the gateway section changed; it takes effect at the next restart")
			nc.Gateway = old.Gateway
		}
		d.applyDaemonChanges(&old.Daemon, &nc.Daemon)
		d.reloadMetrics(old.Target.Metrics, nc.Target.Metrics)
	}
	if errors.Is(err, target.ErrReloadRefused) {
		// Nothing changed: the running configuration stays the one of
		// record.
		info.Error = err.Error()
		info.Changes = nil
		d.log.Error("reload: refused, keeping the running configuration:\n  " + indent(err.Error()))
		return info
	}
	// The target's configuration of record is the new one even if parts
	// of it failed to apply (target.Target.Reload).
	d.mu.Lock()
	d.cur = nc
	d.unsaved = false // the file is the configuration of record again
	d.logLevelSet = false
	d.mu.Unlock()
	if err != nil {
		info.Error = err.Error()
		d.log.Error("reload: the target could not apply everything", zap.Error(err))
		return info
	}
	if diff.Empty() {
		d.log.Info("configuration reloaded: no changes")
	} else {
		d.log.Info("configuration reloaded", zap.Int("changes", len(info.Changes)))
	}
	return info
}

// applyGroup applies nc, a new version of the group's configuration
// merged with this gateway's own parts, as a reload does (the target's
// validation and plan, the gateway guard, the ANA overlay, the images'
// claims) and makes it the running configuration. changeMu is held (the
// gateway's syncGroup). A refused one changes nothing.
func (d *daemon) applyGroup(nc *target.Config) error {
	cur := d.config()
	diff := target.Diff(cur.Target, nc)
	info := &reloadInfo{At: time.Now(), Changes: diff.Summary()}
	err := d.t.Reload(d.targetConfig(nc))
	var ve *target.ValidationError
	if errors.Is(err, target.ErrReloadRefused) || errors.As(err, &ve) {
		return err
	}
	lc := *cur
	lc.Target = nc
	lc.Warnings = append(nc.Warnings(), unknownEnv(os.Environ())...)
	if err != nil {
		info.Error = err.Error()
		d.log.Error("gateway: the target could not apply everything of the group's configuration", zap.Error(err))
	}
	for _, c := range info.Changes {
		d.log.Info("gateway: group configuration: " + c)
	}
	d.mu.Lock()
	d.cur = &lc
	d.lastChange = info
	d.mu.Unlock()
	return nil
}

// applyDaemonChanges applies what can change at run time (the log level)
// and warns about the daemon settings that need a restart.
func (d *daemon) applyDaemonChanges(old, nw *daemonConfig) {
	if old.LogLevel != nw.LogLevel {
		if l, err := zapcore.ParseLevel(nw.LogLevel); err == nil {
			d.level.SetLevel(l)
			d.log.Info("log level changed", zap.String("level", nw.LogLevel))
		}
	}
	restart := func(key string, changed bool) {
		if changed {
			d.log.Warn("reload: " + key + " changed; it takes effect at the next restart")
		}
	}
	restart("daemon.log_format", old.LogFormat != nw.LogFormat)
	restart("daemon.control_socket", old.ControlSocket != nw.ControlSocket)
	restart("daemon.data_dir", old.DataDir != nw.DataDir)
	if old.ShutdownTimeout != nw.ShutdownTimeout || old.HealthLogInterval != nw.HealthLogInterval {
		d.log.Info("reload: daemon timings updated")
	}
}

// shutdown drains and stops the target after signal s. A second SIGTERM or
// SIGINT abandons the drain.
func (d *daemon) shutdown(s os.Signal) int {
	d.stopping.Store(true)
	d.setState(stateStopping)
	d.notify("STOPPING=1\nSTATUS=draining")
	timeout := d.config().Daemon.ShutdownTimeout
	d.log.Info("shutting down: draining I/O", zap.Stringer("signal", s), zap.Duration("timeout", timeout))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.t.Shutdown(ctx) }()
	// A target that ignores its context must not hold the process forever.
	backstop := time.NewTimer(timeout + 5*time.Second)
	defer backstop.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				d.log.Error("shutdown was not clean", zap.Error(err))
				return exitFailure
			}
			d.log.Info("stopped cleanly")
			return exitOK
		case s := <-d.signals:
			if s == syscall.SIGHUP {
				d.log.Info("ignoring SIGHUP while shutting down")
				continue
			}
			d.log.Warn("second signal: abandoning the drain", zap.Stringer("signal", s))
			cancel()
		case <-backstop.C:
			d.log.Error("the target did not stop within the shutdown timeout; exiting")
			return exitFailure
		}
	}
}

// runWatchdog pings systemd's watchdog every half interval while the target
// is healthy (and always while stopping, so a long drain is not killed as a
// hang). An unhealthy target stops the pings and systemd restarts the
// service after WatchdogSec.
func (d *daemon) runWatchdog(ctx context.Context) {
	tick := time.NewTicker(d.watchdog / 2)
	defer tick.Stop()
	healthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := d.t.Healthy()
		if err == nil || d.stopping.Load() {
			if !healthy {
				d.log.Info("target healthy again: resuming watchdog pings")
			}
			healthy = true
			d.notify("WATCHDOG=1")
			continue
		}
		if healthy {
			d.log.Error("target unhealthy: withholding watchdog pings (systemd restarts the service after WatchdogSec)",
				zap.Error(err), zap.Duration("watchdog", d.watchdog))
		}
		healthy = false
	}
}

// monitorHealth logs backend health: every namespace at start and every
// daemon.health_log_interval, and at once when a namespace's critical
// warning, health error or availability changes (checked every
// tuning.health_interval, the target's sampling interval).
func (d *daemon) monitorHealth(ctx context.Context) {
	prev := map[string]target.HealthStatus{}
	d.checkHealth(prev, true)
	lastFull := time.Now()
	for {
		cfg := d.config()
		timer := time.NewTimer(cfg.Target.Tuning.HealthInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		full := time.Since(lastFull) >= cfg.Daemon.HealthLogInterval
		if full {
			lastFull = time.Now()
		}
		d.checkHealth(prev, full)
	}
}

// checkHealth compares the target's health samples with prev (updating
// it) and logs changes, or everything if all.
func (d *daemon) checkHealth(prev map[string]target.HealthStatus, all bool) {
	st := d.t.Status()
	for _, s := range st.Subsystems {
		for _, n := range s.Namespaces {
			if !n.Enabled {
				continue
			}
			key := fmt.Sprintf("%s/%d", s.NQN, n.NSID)
			h := n.Backend.Health
			p, seen := prev[key]
			prev[key] = h
			fields := []zap.Field{
				zap.String("subsystem", s.NQN), zap.Uint32("nsid", n.NSID),
				zap.String("kind", n.Backend.Kind), zap.String("path", n.Backend.Path),
				zap.String("health", h.Summary()),
			}
			if h.Available {
				fields = append(fields, zap.Int("temperature_c", h.TemperatureCelsius),
					zap.Uint8("percentage_used", h.PercentageUsed), zap.Uint64("media_errors", h.MediaErrors))
			}
			bad := h.CriticalWarning != 0 || h.Error != ""
			changed := seen && (p.CriticalWarning != h.CriticalWarning || p.Error != h.Error || p.Available != h.Available)
			switch {
			case changed && bad:
				d.log.Error("backend health changed", fields...)
			case changed:
				d.log.Info("backend health changed", fields...)
			case !seen && bad:
				d.log.Error("backend health", fields...)
			case all && bad:
				d.log.Warn("backend health", fields...)
			case all && h.Available:
				d.log.Info("backend health", fields...)
			case all:
				// Files, memory, loop devices: nothing to report.
				d.log.Debug("backend health", fields...)
			}
		}
	}
}

// Values of daemonStatus.Health.
const (
	healthOK       = "ok"
	healthDegraded = "degraded"
)

// degradation lists what of the configuration is not served: nothing at
// all (no port, or no port serving a subsystem or a referral: after
// nvmetctl clear, a daemon that answers but serves nothing is not
// healthy), namespaces that failed (with their configuration field; they
// are retried on every reload), ports that do not listen, and an unhealthy
// target.
func degradation(st *target.Status, healthErr string) []string {
	var p []string
	if healthErr != "" {
		p = append(p, healthErr)
	}
	serving := false
	for _, pt := range st.Ports {
		serving = serving || len(pt.Subsystems) > 0 || len(pt.Referrals) > 0
	}
	switch {
	case len(st.Ports) == 0:
		p = append(p, "nothing is served: the configuration has no port (nvmetctl port add, or restore a configuration)")
	case !serving:
		p = append(p, "nothing is served: no port serves a subsystem (nvmetctl port link ID NQN, or restore a configuration)")
	}
	for _, pt := range st.Ports {
		if !pt.Listening && pt.Error != "not started" {
			p = append(p, fmt.Sprintf("port %d (%s) is not listening: %s", pt.ID, pt.Address, pt.Error))
		}
	}
	for _, s := range st.Subsystems {
		for _, n := range s.Namespaces {
			if n.State == target.NamespaceFailed {
				field := n.Field
				if field == "" {
					field = fmt.Sprintf("subsystem %s namespace %d", s.NQN, n.NSID)
				}
				p = append(p, fmt.Sprintf("%s: %s (namespace %d of %s failed to open; retried on every reload)", field, n.Error, n.NSID, s.NQN))
			}
		}
	}
	return p
}

// snapshot answers the control socket.
func (d *daemon) snapshot(reports bool) daemonStatus {
	d.mu.Lock()
	st := daemonStatus{
		Version:    programVersion(),
		PID:        os.Getpid(),
		StartedAt:  d.startedAt,
		ConfigFile: d.cur.File,
		State:      d.state,
		LastReload: d.lastReload,
		LastChange: d.lastChange,
		Unsaved:    d.unsaved,
		Pending:    int(d.changeMu.waiters.Load()),
		Warnings:   d.cur.Warnings,
	}
	d.mu.Unlock()
	st.Target = d.t.Status()
	if err := d.t.Healthy(); err != nil {
		st.HealthError = err.Error()
	}
	st.Problems = degradation(&st.Target, st.HealthError)
	if r := st.LastReload; r != nil && r.Error != "" {
		// A refused reload leaves a configuration running that is not the
		// file's (a key rotation that did not happen): loud until a reload
		// succeeds.
		st.Problems = append(st.Problems, fmt.Sprintf("the last reload (%s) was refused or not all applied: %s", r.At.Format(time.RFC3339), r.Error))
	}
	if st.Gateway = d.gw.Status(); st.Gateway != nil && st.Gateway.Degraded != "" {
		st.Problems = append(st.Problems, "gateway: "+st.Gateway.Degraded)
	}
	st.Health = healthOK
	if len(st.Problems) > 0 {
		st.Health = healthDegraded
	}
	if reports {
		for _, s := range st.Target.Subsystems {
			for _, n := range s.Namespaces {
				if n.Backend.Kind != string(backend.KindBlock) {
					continue
				}
				hr := healthReport{Subsystem: s.NQN, NSID: n.NSID, Path: n.Backend.Path}
				r, err := d.t.HealthReport(s.NQN, n.NSID)
				if err != nil {
					hr.Error = err.Error()
				} else {
					hr.Report = r
				}
				st.HealthReports = append(st.HealthReports, hr)
			}
		}
	}
	return st
}
