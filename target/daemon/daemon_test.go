package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// fakeTarget stands in for *target.Target until the target lands: it
// records calls and reports a status made from its configuration.
type fakeTarget struct {
	mu           sync.Mutex
	cfg          *target.Config
	started      bool
	startErr     error
	startGate    chan struct{} // if set, Start waits for it (or ctx)
	reloads      []*target.Config
	reloadErr    error
	shutdowns    int
	shutdownErr  error
	drainForever bool // Shutdown waits for its context
	healthy      error
	health       map[uint32]target.HealthStatus
	reports      map[uint32]string
	traceFile    io.WriteCloser
}

func newFakeTarget(cfg *target.Config) *fakeTarget {
	return &fakeTarget{cfg: cfg, health: map[uint32]target.HealthStatus{}, reports: map[uint32]string{}}
}

func (f *fakeTarget) Start(ctx context.Context) error {
	f.mu.Lock()
	gate, err := f.startGate, f.startErr
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.started = true
	f.mu.Unlock()
	return nil
}

func (f *fakeTarget) Reload(cfg *target.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads = append(f.reloads, cfg)
	f.cfg = cfg
	return f.reloadErr
}

func (f *fakeTarget) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.shutdowns++
	forever, err := f.drainForever, f.shutdownErr
	f.mu.Unlock()
	if forever {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *fakeTarget) Healthy() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthy
}

func (f *fakeTarget) HealthReport(nqn string, nsid uint32) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.reports[nsid]; ok {
		return r, nil
	}
	return "", errors.New("no report")
}

func (f *fakeTarget) Status() target.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st target.Status
	for _, p := range f.cfg.Ports {
		st.Ports = append(st.Ports, target.PortStatus{ID: p.ID, Address: p.ListenAddress(), Listening: f.started, Subsystems: p.Subsystems})
	}
	for _, s := range f.cfg.Subsystems {
		ss := target.SubsystemStatus{NQN: s.NQN, Serial: s.Serial, Model: s.Model, AllowAnyHost: s.AllowAnyHost}
		for _, n := range s.Namespaces {
			ss.Namespaces = append(ss.Namespaces, target.NamespaceStatus{NSID: n.NSID, Enabled: n.IsEnabled(), State: target.NamespaceOnline,
				Backend: target.BackendStatus{Kind: n.Backend.Kind, Path: n.Backend.Path, Health: f.health[n.NSID]}})
		}
		st.Subsystems = append(st.Subsystems, ss)
	}
	return st
}

func (f *fakeTarget) Queues() []target.QueueStatus { return nil }

func (f *fakeTarget) ReopenNamespaces(uint32, sync.Locker) error { return nil }

func (f *fakeTarget) SetGroupANA(uint32, nvmeof.ANAState) error { return nil }

func (f *fakeTarget) set(fn func(f *fakeTarget)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// notes records sd_notify messages.
type notes struct {
	mu   sync.Mutex
	msgs []string
	ch   chan string
}

func newNotes() *notes { return &notes{ch: make(chan string, 1000)} }

func (n *notes) notify(s string) {
	n.mu.Lock()
	n.msgs = append(n.msgs, s)
	n.mu.Unlock()
	n.ch <- s
}

// waitFor waits for a message starting with prefix and returns it.
func (n *notes) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-n.ch:
			if strings.HasPrefix(m, prefix) {
				return m
			}
		case <-timeout:
			n.mu.Lock()
			defer n.mu.Unlock()
			t.Fatalf("no sd_notify %q; got %q", prefix, n.msgs)
			return ""
		}
	}
}

// testDaemon is a daemon around a fake target, with injected signals and
// notifications, and observed logs.
type testDaemon struct {
	d       *daemon
	fake    *fakeTarget
	signals chan os.Signal
	notes   *notes
	logs    *observer.ObservedLogs
	cfgFile string
	code    chan int
}

// daemonConfigYAML is the test daemon's configuration file; sock is the
// control socket.
func daemonConfigYAML(sock, extra string) string {
	return fmt.Sprintf(`daemon:
  control_socket: %s
  shutdown_timeout: 2s
ports:
  - {id: 1, address: 127.0.0.1, service_id: 4420, subsystems: [nqn.2014-08.org.example:a]}
subsystems:
  - nqn: nqn.2014-08.org.example:a
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 1MiB}}
%s`, sock, extra)
}

// startTestDaemon loads a configuration file in a temporary directory and
// runs a daemon on it in the background. The caller's fakeTarget hook may
// adjust the fake before it starts.
func startTestDaemon(t *testing.T, prep func(f *fakeTarget)) *testDaemon {
	t.Helper()
	dir := isolate(t)
	sock := filepath.Join(dir, "ctl.sock")
	td := &testDaemon{
		signals: make(chan os.Signal, 8),
		notes:   newNotes(),
		cfgFile: writeFile(t, dir, "nvmetd.yaml", daemonConfigYAML(sock, "")),
		code:    make(chan int, 1),
	}
	o, fs, err := parseFlags([]string{"--config", td.cfgFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := loadConfig(o, fs, true)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	td.logs = logs
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	td.d = &daemon{
		log:     zap.New(core),
		level:   level,
		load:    func() (*loadedConfig, error) { return loadConfig(o, fs, true) },
		notify:  td.notes.notify,
		signals: td.signals,
		cur:     lc,
	}
	saved := newTargetService
	t.Cleanup(func() { newTargetService = saved })
	created := make(chan struct{})
	newTargetService = func(cfg *target.Config, log *zap.Logger) (targetService, error) {
		td.fake = newFakeTarget(cfg)
		if prep != nil {
			prep(td.fake)
		}
		close(created)
		return td.fake, nil
	}
	go func() { td.code <- td.d.run() }()
	select {
	case <-created:
	case c := <-td.code:
		select {
		case <-created:
			td.code <- c // it created the target, then exited: for exit()
		default:
			t.Fatalf("daemon exited %d before creating the target; logs: %v", c, logMessages(logs))
		}
	}
	return td
}

// exit waits for the daemon to exit and returns its code.
func (td *testDaemon) exit(t *testing.T) int {
	t.Helper()
	select {
	case c := <-td.code:
		return c
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon did not exit; logs: %v", logMessages(td.logs))
		return -1
	}
}

func logMessages(logs *observer.ObservedLogs) []string {
	var m []string
	for _, e := range logs.All() {
		s := e.Level.String() + " " + e.Message
		for k, v := range e.ContextMap() {
			s += fmt.Sprintf(" %s=%v", k, v)
		}
		m = append(m, s)
	}
	return m
}

// hasLog reports whether a log entry at level contains msg.
func hasLog(logs *observer.ObservedLogs, level zapcore.Level, msg string) bool {
	for _, e := range logs.All() {
		if e.Level == level && strings.Contains(e.Message, msg) {
			return true
		}
	}
	return false
}

// TestDaemonLifecycle: start, reload (good, bad, log level), status,
// clean stop.
func TestDaemonLifecycle(t *testing.T) {
	td := startTestDaemon(t, nil)
	ready := td.notes.waitFor(t, "READY=1")
	if ready != "READY=1\nSTATUS=serving 1 subsystems on 1 ports" {
		t.Errorf("ready message %q", ready)
	}
	sock := td.d.config().Daemon.ControlSocket
	ctx := context.Background()
	st, err := fetchStatus(ctx, sock, false)
	if err != nil || st.State != stateRunning || len(st.Target.Ports) != 1 || !st.Target.Ports[0].Listening || st.LastReload != nil {
		t.Fatalf("status: %+v %v", st, err)
	}
	// The ready line names both ways to connect.
	readyLine := td.logs.FilterMessage("nvmetd ready").All()
	if len(readyLine) != 1 || !strings.Contains(fmt.Sprint(readyLine[0].ContextMap()["connect_linux"]), "nvme connect -t rdma -a 127.0.0.1 -s 4420 -n nqn.2014-08.org.example:a") ||
		!strings.HasSuffix(fmt.Sprint(readyLine[0].ContextMap()["connect_nvmeof"]), "nvmeof connect -t rdma -a 127.0.0.1 -s 4420 -n nqn.2014-08.org.example:a") {
		t.Errorf("logs: %v", logMessages(td.logs))
	}

	// A good reload: a namespace added, the log level changed.
	writeFile(t, filepath.Dir(td.cfgFile), "nvmetd.yaml", strings.Replace(
		strings.Replace(daemonConfigYAML(sock, ""), "  shutdown_timeout: 2s", "  shutdown_timeout: 2s\n  log_level: debug", 1),
		"      - {nsid: 1, backend: {kind: memory, size: 1MiB}}",
		"      - {nsid: 1, backend: {kind: memory, size: 1MiB}}\n      - {nsid: 2, backend: {kind: \"null\", size: 1GiB}}", 1))
	td.signals <- syscall.SIGHUP
	reloading := td.notes.waitFor(t, "RELOADING=1")
	if !strings.HasPrefix(reloading, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("reloading message %q", reloading)
	}
	td.notes.waitFor(t, "READY=1")
	td.fake.mu.Lock()
	nr := len(td.fake.reloads)
	var ns int
	if nr > 0 {
		ns = len(td.fake.reloads[0].Subsystems[0].Namespaces)
	}
	td.fake.mu.Unlock()
	if nr != 1 || ns != 2 {
		t.Fatalf("reloads %d, namespaces %d", nr, ns)
	}
	if td.d.level.Level() != zapcore.DebugLevel {
		t.Errorf("log level %s after reload", td.d.level.Level())
	}
	st, err = fetchStatus(ctx, sock, false)
	if err != nil || st.LastReload == nil || st.LastReload.Error != "" ||
		len(st.LastReload.Changes) != 1 || st.LastReload.Changes[0] != "subsystem nqn.2014-08.org.example:a namespace 2 added (null )" {
		t.Errorf("status after reload: %+v %v", st.LastReload, err)
	}

	// A bad reload keeps the running configuration.
	writeFile(t, filepath.Dir(td.cfgFile), "nvmetd.yaml", daemonConfigYAML(sock, "hosts: [{nqn: not-an-nqn}]\n"))
	td.signals <- syscall.SIGHUP
	td.notes.waitFor(t, "RELOADING=1")
	td.notes.waitFor(t, "READY=1")
	td.fake.mu.Lock()
	nr = len(td.fake.reloads)
	td.fake.mu.Unlock()
	if nr != 1 {
		t.Errorf("an invalid configuration reached the target (%d reloads)", nr)
	}
	if !hasLog(td.logs, zapcore.ErrorLevel, `hosts[0].nqn: "not-an-nqn" is not a valid NQN`) {
		t.Errorf("logs: %v", logMessages(td.logs))
	}
	if got := len(td.d.config().Target.Subsystems[0].Namespaces); got != 2 {
		t.Errorf("running configuration changed: %d namespaces", got)
	}
	st, _ = fetchStatus(ctx, sock, false)
	if st == nil || st.LastReload == nil || !strings.Contains(st.LastReload.Error, "hosts[0].nqn") {
		t.Errorf("status after bad reload: %+v", st)
	}

	// A reload the target cannot apply completely.
	writeFile(t, filepath.Dir(td.cfgFile), "nvmetd.yaml", daemonConfigYAML(sock, ""))
	td.fake.set(func(f *fakeTarget) { f.reloadErr = errors.New("port 1: bind: address already in use") })
	td.signals <- syscall.SIGHUP
	td.notes.waitFor(t, "READY=1")
	if !hasLog(td.logs, zapcore.ErrorLevel, "reload: the target could not apply everything") {
		t.Errorf("logs: %v", logMessages(td.logs))
	}

	td.signals <- syscall.SIGTERM
	td.notes.waitFor(t, "STOPPING=1")
	if code := td.exit(t); code != exitOK {
		t.Errorf("exit %d", code)
	}
	if td.fake.shutdowns != 1 || !hasLog(td.logs, zapcore.InfoLevel, "stopped cleanly") {
		t.Errorf("shutdowns %d; logs %v", td.fake.shutdowns, logMessages(td.logs))
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left: %v", err)
	}
}

func TestDaemonStartFailure(t *testing.T) {
	td := startTestDaemon(t, func(f *fakeTarget) {
		f.startErr = errors.New("port 1: listen tcp4 127.0.0.1:4420: bind: address already in use")
	})
	if code := td.exit(t); code != exitFailure {
		t.Errorf("exit %d", code)
	}
	if !hasLog(td.logs, zapcore.ErrorLevel, "target failed to start") {
		t.Errorf("logs: %v", logMessages(td.logs))
	}
	for _, m := range td.notes.msgs {
		if strings.HasPrefix(m, "READY=1") {
			t.Error("READY=1 sent for a target that did not start")
		}
	}
}

func TestDaemonShutdown(t *testing.T) {
	tests := []struct {
		name    string
		prep    func(f *fakeTarget)
		signals []os.Signal
		code    int
		log     string
	}{
		{"unclean", func(f *fakeTarget) { f.shutdownErr = errors.New("flush nsid 1: input/output error") },
			[]os.Signal{syscall.SIGINT}, exitFailure, "shutdown was not clean"},
		{"drain times out", func(f *fakeTarget) { f.drainForever = true },
			[]os.Signal{syscall.SIGTERM}, exitFailure, "shutdown was not clean"},
		{"second signal abandons the drain", func(f *fakeTarget) { f.drainForever = true },
			[]os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT}, exitFailure, "second signal: abandoning the drain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := startTestDaemon(t, tt.prep)
			td.notes.waitFor(t, "READY=1")
			for _, s := range tt.signals {
				td.signals <- s
			}
			if code := td.exit(t); code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if !hasLog(td.logs, zapcore.ErrorLevel, tt.log) && !hasLog(td.logs, zapcore.WarnLevel, tt.log) {
				t.Errorf("logs lack %q: %v", tt.log, logMessages(td.logs))
			}
		})
	}
}

// TestDaemonSignalsDuringStart: SIGHUP during start-up is applied once
// running; SIGTERM aborts the start.
func TestDaemonSignalsDuringStart(t *testing.T) {
	gate := make(chan struct{})
	td := startTestDaemon(t, func(f *fakeTarget) { f.startGate = gate })
	td.signals <- syscall.SIGHUP
	time.Sleep(10 * time.Millisecond) // let the daemon take the signal while starting (not required for correctness)
	close(gate)
	td.notes.waitFor(t, "READY=1")
	td.notes.waitFor(t, "RELOADING=1")
	td.notes.waitFor(t, "READY=1")
	td.signals <- syscall.SIGTERM
	if code := td.exit(t); code != exitOK {
		t.Errorf("exit %d", code)
	}

	td = startTestDaemon(t, func(f *fakeTarget) { f.startGate = make(chan struct{}) })
	td.signals <- syscall.SIGTERM
	if code := td.exit(t); code != exitOK {
		t.Errorf("aborted start: exit %d", code)
	}
	if !hasLog(td.logs, zapcore.InfoLevel, "aborting the start") {
		t.Errorf("logs: %v", logMessages(td.logs))
	}
}

// TestWatchdog: pings at half the interval while healthy, none while not,
// and always while stopping.
func TestWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.InfoLevel)
		fake := newFakeTarget(&target.Config{})
		var mu sync.Mutex
		pings := 0
		d := &daemon{log: zap.New(core), t: fake, watchdog: 10 * time.Second, notify: func(s string) {
			if s == "WATCHDOG=1" {
				mu.Lock()
				pings++
				mu.Unlock()
			}
		}}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := pings
			pings = 0
			return n
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.runWatchdog(ctx); close(done) }()

		time.Sleep(31 * time.Second)
		synctest.Wait()
		if n := count(); n != 6 {
			t.Errorf("healthy: %d pings in 31s at a 10s watchdog, want 6", n)
		}
		fake.set(func(f *fakeTarget) { f.healthy = errors.New("port 1: accept loop ended: too many open files") })
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := count(); n != 0 {
			t.Errorf("unhealthy: %d pings", n)
		}
		if logs.FilterMessageSnippet("withholding watchdog pings").Len() != 1 {
			t.Errorf("logs: %v", logMessages(logs))
		}
		d.stopping.Store(true)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := count(); n != 2 {
			t.Errorf("stopping: %d pings, want 2", n)
		}
		cancel()
		<-done
	})
}

// TestHealthMonitor: everything is logged at start and every
// health_log_interval; a change of critical warning at once.
func TestHealthMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		cfg := &target.Config{Subsystems: []target.SubsystemConfig{{NQN: "nqn.2014-08.org.example:a", Namespaces: []target.NamespaceConfig{
			{NSID: 1, Backend: target.BackendConfig{Kind: "block", Path: "/dev/nvme1n1"}},
			{NSID: 2, Backend: target.BackendConfig{Kind: "file", Path: "/srv/a.img"}},
		}}}}
		cfg.ApplyDefaults()
		fake := newFakeTarget(cfg)
		now := time.Now()
		fake.health[1] = target.HealthStatus{CheckedAt: now, Available: true, Reason: "nvme smart log"}
		fake.health[2] = target.HealthStatus{CheckedAt: now, Reason: "file: no device health"}
		d := &daemon{log: zap.New(core), t: fake, cur: &loadedConfig{Target: cfg, Daemon: daemonConfig{HealthLogInterval: time.Hour}}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.monitorHealth(ctx); close(done) }()
		synctest.Wait()
		if n := logs.FilterMessage("backend health").Len(); n != 2 {
			t.Errorf("start: %d health lines, want 2: %v", n, logMessages(logs))
		}
		logs.TakeAll()

		fake.set(func(f *fakeTarget) {
			f.health[1] = target.HealthStatus{CheckedAt: time.Now(), Available: true, CriticalWarning: 0x01}
		})
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		changed := logs.FilterMessage("backend health changed").All()
		if len(changed) != 1 || changed[0].Level != zapcore.ErrorLevel || changed[0].ContextMap()["health"] != "critical: spare below threshold" {
			t.Errorf("change: %v", logMessages(logs))
		}
		logs.TakeAll()

		time.Sleep(58 * time.Minute)
		synctest.Wait()
		if n := logs.Len(); n != 0 {
			t.Errorf("logged without a change: %v", logMessages(logs))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if w := logs.FilterMessage("backend health").All(); len(w) != 2 || w[0].Level != zapcore.WarnLevel || w[1].Level != zapcore.DebugLevel {
			t.Errorf("hourly: %v", logMessages(logs))
		}
		cancel()
		<-done
	})
}

// TestRunInProcess runs the whole program in this process with a fake
// target: real signals (sent to this process), a real sd_notify socket,
// the systemd watchdog, the control socket and `nvmetd status`.
func TestRunInProcess(t *testing.T) {
	dir := isolate(t)
	saved := newTargetService
	t.Cleanup(func() { newTargetService = saved })
	fakes := make(chan *fakeTarget, 1)
	newTargetService = func(cfg *target.Config, log *zap.Logger) (targetService, error) {
		f := newFakeTarget(cfg)
		fakes <- f
		return f, nil
	}

	notifySock, msgs := notifySocket(t, dir)
	waitMsg := func(prefix string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, prefix) {
					return
				}
			case <-timeout:
				t.Fatalf("no sd_notify %q", prefix)
			}
		}
	}
	t.Setenv("NOTIFY_SOCKET", notifySock)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))

	sock := filepath.Join(dir, "ctl.sock")
	cfgFile := writeFile(t, dir, "nvmetd.yaml", daemonConfigYAML(sock, ""))
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--config", cfgFile, "--log-format", "json"}, io.Discard, &stderr) }()
	fake := <-fakes
	waitMsg("READY=1")
	waitMsg("WATCHDOG=1")

	var out syncBuffer
	if c := run([]string{"status", "--config", cfgFile}, &out, io.Discard); c != exitOK || !strings.Contains(out.String(), "127.0.0.1:4420  listening") {
		t.Errorf("status: exit %d\n%s", c, out.String())
	}

	writeFile(t, dir, "nvmetd.yaml", daemonConfigYAML(sock, "tuning: {max_io_queues: 3}\n"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMsg("RELOADING=1\nMONOTONIC_USEC=")
	waitMsg("READY=1")
	fake.mu.Lock()
	if len(fake.reloads) != 1 || fake.reloads[0].Tuning.MaxIOQueues != 3 {
		t.Errorf("reloads: %d", len(fake.reloads))
	}
	fake.mu.Unlock()

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitMsg("STOPPING=1")
	select {
	case c := <-code:
		if c != exitOK {
			t.Errorf("exit %d; log:\n%s", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after SIGTERM")
	}
	for _, w := range []string{`"msg":"nvmetd ready"`, `"msg":"reload: tuning changed: tuning.max_io_queues"`, `"msg":"stopped cleanly"`} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("log lacks %s:\n%s", w, stderr.String())
		}
	}
}
