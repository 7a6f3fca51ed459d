package connd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/initiator/fusedev"
	"github.com/nvmetd/nvmetd/initiator/hostfs"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// daemon is "nvmeof serve": one subsystem reached through one controller
// or more (paths), the FUSE device files of its namespaces (one per
// namespace, whatever the number of paths), its loop device and mount, and
// the control socket.
type daemon struct {
	store hoststate.Store
	dev   string
	opts  Options
	cfg   initiator.Config
	log   *zap.Logger

	sub  *initiator.Subsystem
	ctrl *initiator.Controller // the first path's
	// metrics serves --metrics-listen (nil: off).
	metrics *metricserve.Server
	srv     *fuse.Server
	root    *fusedev.Root
	ln      net.Listener

	mu       sync.Mutex
	st       hoststate.Controller
	lastErr  string
	shutdown chan struct{}
	stopMu   sync.Mutex // one teardown at a time
	stopped  bool
	// saveMu orders state writes: start and the controller's events
	// (reconnects, namespace changes) save concurrently, and the last
	// snapshot taken must be the last written.
	saveMu sync.Mutex
	// removed is set once stop has removed the instance directory: a
	// late event must not recreate a state file there (the directory
	// may already belong to the next controller).
	removed bool
	wg      sync.WaitGroup
	// otherWrites is set once a bench that writes or an admin command
	// (which may write) ran: with the FUSE files' own flags, what says
	// whether disconnect must flush.
	otherWrites atomic.Bool
}

// Serve is "nvmeof serve": it connects the controller of instance dev (a
// directory claimed in s) with o, mounts its device files (and, if o asks,
// a loop device and filesystem), writes one readiness line to ready (nil:
// none) and serves the control socket until a disconnect or SIGTERM or
// SIGINT tears it down. It logs to logw. The error is the connect's (the
// daemon then undid what it had set up); nil once disconnected.
func Serve(s hoststate.Store, dev string, o Options, ready io.WriteCloser, logw io.Writer) error {
	d := &daemon{store: s, dev: dev, opts: o, shutdown: make(chan struct{})}
	zc := zap.NewProductionEncoderConfig()
	zc.EncodeTime = zapcore.ISO8601TimeEncoder
	d.log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zc), zapcore.Lock(zapcore.AddSync(logw)), zap.InfoLevel)).
		With(zap.String("device", d.dev))
	err := d.start()
	msg := readyMsg{OK: err == nil}
	if err != nil {
		d.log.Error("connect failed", zap.Error(err))
		msg.Error = err.Error()
		_, _ = d.stop(true)
	} else {
		msg.State = d.state()
	}
	if ready != nil {
		b, _ := json.Marshal(msg)
		_, _ = ready.Write(append(b, '\n'))
		ready.Close()
	}
	if err != nil {
		return err
	}
	d.log.Info("ready", zap.String("subnqn", d.cfg.SubNQN), zap.String("traddr", d.cfg.Address))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sigs:
		d.log.Info("signal, disconnecting", zap.Stringer("signal", s))
		if err := d.teardown(true); err != nil {
			d.log.Error("teardown", zap.Error(err))
		}
	case <-d.shutdown:
	}
	d.wg.Wait()
	d.log.Info("disconnected")
	return nil
}

// start connects the controller, mounts the device files and, if asked,
// the filesystem, and opens the control socket.
func (d *daemon) start() error {
	// The daemon serves I/O of a loop device: it must not wait on that
	// device's writeback when it allocates (see startIOFlusher).
	if err := unix.Prctl(unix.PR_SET_IO_FLUSHER, 1, 0, 0, 0); err != nil {
		d.log.Warn("PR_SET_IO_FLUSHER not available (needs CAP_SYS_RESOURCE): under memory pressure the loop device's writeback may wait on this daemon", zap.Error(err))
	}
	var err error
	d.cfg, err = d.opts.Fabrics.Config(d.opts.Fabrics.NQN, d.log)
	if err != nil {
		return err
	}
	d.cfg.OnEvent = d.onEvent
	pol, err := initiator.ParseIOPolicy(d.opts.IOPolicy)
	if err != nil {
		return err
	}
	mc := initiator.MultipathConfig{IOPolicy: pol, Logger: d.log, OnChange: d.onPathChange}
	if d.opts.FastIOFailTmo >= 0 {
		// fast_io_fail_tmo=0 fails I/O as soon as the path is lost.
		mc.FastIOFailTimeout = max(time.Duration(d.opts.FastIOFailTmo)*time.Second, time.Nanosecond)
	}
	d.sub = initiator.NewSubsystem(d.cfg.SubNQN, mc)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ConnectTimeout+5*time.Second)
	defer cancel()
	p, err := d.sub.AddPath(ctx, d.cfg)
	if err != nil {
		return err
	}
	d.ctrl = p.Controller()
	id := d.ctrl.IdentifyController()
	nq, qs := d.ctrl.QueueCount()
	d.st = hoststate.Controller{
		Device: d.dev, PID: os.Getpid(), Transport: d.cfg.TransportName(), Address: d.cfg.Address, SubNQN: d.cfg.SubNQN,
		HostNQN: d.cfg.HostNQN, HostID: nvmeof.FormatUUID(d.cfg.HostID), CNTLID: d.ctrl.CNTLID(),
		Model: id.MN(), Serial: id.SN(), Firmware: id.FR(), IOQueues: nq, QueueSize: qs,
		CRC: d.ctrl.CRC(), Since: time.Now(), Log: filepath.Join(d.store.Dir, d.dev+".log"),
	}
	devDir := filepath.Join(d.store.InstanceDir(d.dev), "dev")
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		return err
	}
	d.srv, d.root, err = fusedev.Mount(devDir, d.dev, d.opts.FUSEDirectIO, d.sub.Namespaces())
	if err != nil {
		return fmt.Errorf("FUSE mount on %s: %w", devDir, err)
	}
	d.refreshNamespaces()
	unlock, err := attachLock(d.store.Dir)
	if err != nil {
		return fmt.Errorf("attach lock: %w", err)
	}
	defer unlock()
	if err := attachedElsewhere(d.store, d.dev, d.state().Namespaces); err != nil {
		return err
	}
	// Publish the namespaces (under the lock) before anything else may
	// check against them.
	if err := d.saveState(); err != nil {
		return err
	}
	if d.opts.Mount != "" || d.opts.Loop {
		if err := d.mountNamespace(); err != nil {
			return err
		}
	}
	if d.opts.MetricsListen != "" {
		if d.metrics, err = d.startHostMetrics(d.opts.MetricsListen); err != nil {
			return err
		}
	}
	sock := filepath.Join(d.store.InstanceDir(d.dev), "ctl.sock")
	_ = os.Remove(sock)
	if d.ln, err = net.Listen("unix", sock); err != nil {
		return err
	}
	d.wg.Add(1)
	go d.serveCtl()
	return d.saveState()
}

// mountNamespace attaches the namespace's file to a loop device, makes the
// filesystem if asked, and mounts it.
func (d *daemon) mountNamespace() error {
	d.mu.Lock()
	var target *hoststate.Namespace
	for i := range d.st.Namespaces {
		if d.opts.MountNSID == 0 || d.st.Namespaces[i].NSID == d.opts.MountNSID {
			target = &d.st.Namespaces[i]
			break
		}
	}
	d.mu.Unlock()
	if target == nil {
		return fmt.Errorf("no namespace to mount (nsid %d)", d.opts.MountNSID)
	}
	loop, err := hostfs.AttachLoop(target.File, target.BlockSize, d.opts.LoopDirectIO)
	if err != nil {
		return err
	}
	d.mu.Lock()
	target.Loop = loop
	d.mu.Unlock()
	d.log.Info("loop device attached", zap.String("loop", loop), zap.Bool("direct_io", hostfs.LoopDirectIO(loop)))
	if d.opts.MKFS {
		if !d.opts.Force {
			if err := hostfs.CheckBlank(loop, fmt.Sprintf("%sn%d", d.dev, target.NSID)); err != nil {
				return err
			}
		} else {
			d.log.Warn("--mkfs --force: making a filesystem whatever the namespace holds", zap.String("loop", loop))
		}
		if err := hostfs.MakeFS(d.opts.FSType, loop); err != nil {
			return err
		}
	}
	if d.opts.Mount == "" {
		return nil
	}
	if err := hostfs.Mount(d.opts.FSType, loop, d.opts.Mount, d.opts.MountOpts); err != nil {
		return err
	}
	d.mu.Lock()
	target.Mount, target.FSType = d.opts.Mount, d.opts.FSType
	d.mu.Unlock()
	d.log.Info("mounted", zap.String("dir", d.opts.Mount), zap.String("fstype", d.opts.FSType))
	return nil
}

// refreshNamespaces brings the state's namespaces (and the FUSE files) in
// line with the controller's, keeping loop devices and mounts.
func (d *daemon) refreshNamespaces() {
	nss := d.sub.Namespaces()
	d.mu.Lock()
	defer d.mu.Unlock()
	old := map[uint32]hoststate.Namespace{}
	for _, n := range d.st.Namespaces {
		old[n.NSID] = n
	}
	d.st.Namespaces = d.st.Namespaces[:0]
	seen := map[uint32]bool{}
	for _, ns := range nss {
		seen[ns.NSID()] = true
		ids := ns.Identifiers()
		n := hoststate.Namespace{NSID: ns.NSID(), Size: ns.Size(), BlockSize: ns.BlockSize(),
			File: filepath.Join(d.store.InstanceDir(d.dev), "dev", fusedev.Name(ns.NSID()))}
		if ids.HasUUID {
			n.UUID = nvmeof.FormatUUID(ids.UUID)
		}
		if ids.HasNGUID {
			n.NGUID = fmt.Sprintf("%x", ids.NGUID)
		}
		if o, ok := old[ns.NSID()]; ok {
			n.Loop, n.Mount, n.FSType = o.Loop, o.Mount, o.FSType
		} else if d.root != nil && d.root.GetChild(fusedev.Name(ns.NSID())) == nil {
			d.root.AddNamespace(ns)
		}
		d.st.Namespaces = append(d.st.Namespaces, n)
	}
	for nsid, o := range old {
		if seen[nsid] {
			continue
		}
		if d.root != nil && !o.Gone {
			d.root.RemoveNamespace(nsid)
		}
		// The target removed it, but its loop device and mount are still
		// here: keep them on record so that disconnect takes them down.
		if o.Loop != "" || o.Mount != "" {
			o.Gone = true
			d.st.Namespaces = append(d.st.Namespaces, o)
		}
	}
}

func (d *daemon) onEvent(e initiator.Event) {
	d.log.Info("controller event", zap.Stringer("event", e.Kind), zap.Error(e.Err), zap.Uint32s("nsids", e.NSIDs))
	d.mu.Lock()
	if e.Err != nil {
		d.lastErr = e.Err.Error()
	}
	d.mu.Unlock()
	if d.ctrl != nil {
		_ = d.saveState()
	}
}

// onPathChange follows a path's new namespaces and ANA states (the
// subsystem has read them again).
func (d *daemon) onPathChange(*initiator.Path) {
	if d.ctrl == nil {
		return
	}
	d.refreshNamespaces()
	_ = d.saveState()
}

// addPath connects another controller of the subsystem (connect to
// another port): its namespaces are the device's, through one more path.
func (d *daemon) addPath(o *Options) error {
	if o.Fabrics.NQN != d.cfg.SubNQN {
		return fmt.Errorf("subsystem %q is not %s's (%s)", o.Fabrics.NQN, d.dev, d.cfg.SubNQN)
	}
	cfg, err := o.Fabrics.Config(o.Fabrics.NQN, d.log)
	if err != nil {
		return err
	}
	if cfg.HostNQN != d.cfg.HostNQN {
		return fmt.Errorf("host NQN %s differs from the subsystem's other paths (%s)", cfg.HostNQN, d.cfg.HostNQN)
	}
	for _, p := range d.sub.Paths() {
		if p.Address() == cfg.Address {
			return fmt.Errorf("already connected to %s at %s (%s)", cfg.SubNQN, cfg.Address, d.dev)
		}
	}
	cfg.OnEvent = d.onEvent
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout+5*time.Second)
	defer cancel()
	p, err := d.sub.AddPath(ctx, cfg)
	if err != nil {
		return err
	}
	if o.IOPolicy != "" {
		pol, err := initiator.ParseIOPolicy(o.IOPolicy)
		if err == nil {
			d.sub.SetIOPolicy(pol)
		}
	}
	d.log.Info("path added", zap.String("traddr", p.Address()), zap.Uint16("cntlid", p.Controller().CNTLID()), zap.Int("paths", len(d.sub.Paths())))
	d.refreshNamespaces()
	return d.saveState()
}

// state is a snapshot of the controller for list.
func (d *daemon) state() *hoststate.Controller {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.st
	st.Namespaces = append([]hoststate.Namespace(nil), d.st.Namespaces...)
	if d.ctrl != nil {
		st.State = d.ctrl.State().String()
		st.Reconnects = d.ctrl.Reconnects()
		if d.ctrl.State() == initiator.StateLive {
			st.CNTLID = d.ctrl.CNTLID()
		}
	}
	if d.sub != nil {
		st.IOPolicy = d.sub.IOPolicy().String()
		st.Paths = nil
		for _, p := range d.sub.Paths() {
			c := p.Controller()
			ps := hoststate.Path{Address: p.Address(), Transport: p.Transport(), State: c.State().String(), Reconnects: c.Reconnects()}
			if c.State() == initiator.StateLive {
				ps.CNTLID = c.CNTLID()
			}
			for _, n := range st.Namespaces {
				ps.ANA = append(ps.ANA, hoststate.ANANamespace{NSID: n.NSID, State: p.ANAState(n.NSID).String()})
			}
			for _, g := range p.ANAGroups() {
				ps.Groups = append(ps.Groups, hoststate.ANAGroup{ID: g.ID, State: g.State.String(), NSIDs: g.NSIDs})
			}
			st.Paths = append(st.Paths, ps)
		}
		if len(st.Paths) > 1 {
			// The device is live while one path is.
			for _, ps := range st.Paths {
				if ps.State == initiator.StateLive.String() {
					st.State = ps.State
				}
			}
		}
	}
	st.LastError = d.lastErr
	return &st
}

func (d *daemon) saveState() error {
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	if d.removed {
		return nil
	}
	return d.store.Write(d.state())
}

// serveCtl answers the control socket.
func (d *daemon) serveCtl() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer c.Close()
			d.handle(c)
		}()
	}
}

func (d *daemon) handle(c net.Conn) {
	var req Request
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	enc := json.NewEncoder(c)
	if err != nil {
		_ = enc.Encode(Response{Error: "bad request: " + err.Error()})
		return
	}
	switch req.Op {
	case "admin":
		d.otherWrites.Store(true)
		d.handleAdmin(line, enc)
	case "status":
		_ = enc.Encode(Response{OK: true, State: d.state()})
	case "disconnect":
		err := d.teardown(req.Force)
		if err != nil {
			_ = enc.Encode(Response{Error: err.Error(), State: d.state()})
			return
		}
		_ = enc.Encode(Response{OK: true})
	case "bench":
		if req.Bench == nil {
			_ = enc.Encode(Response{Error: "no bench parameters"})
			return
		}
		ns := d.sub.Namespace(req.Bench.NSID)
		if ns == nil {
			_ = enc.Encode(Response{Error: fmt.Sprintf("no namespace %d", req.Bench.NSID)})
			return
		}
		if why := d.inUse(req.Bench.NSID); why != "" && !req.Bench.Force && req.Bench.Writes() {
			_ = enc.Encode(Response{Error: fmt.Sprintf("%sn%d is in use (%s): a load that writes destroys its filesystem; "+
				"run a read-only load (--rw read or randread), unmount or disconnect it first, or give --force", d.dev, req.Bench.NSID, why)})
			return
		}
		if b := req.Bench; b.Verify || b.PrefillOnly || (b.RW != "read" && b.RW != "randread") {
			d.otherWrites.Store(true)
		}
		res, err := bench.Run(context.Background(), ns, *req.Bench, func(s string) {
			_ = enc.Encode(Response{OK: true, Progress: s})
		})
		if err != nil {
			_ = enc.Encode(Response{Error: err.Error()})
			return
		}
		_ = enc.Encode(Response{OK: true, Result: res})
	case "add-path":
		if req.Path == nil {
			_ = enc.Encode(Response{Error: "no path options"})
			return
		}
		if err := d.addPath(req.Path); err != nil {
			_ = enc.Encode(Response{Error: err.Error(), State: d.state()})
			return
		}
		_ = enc.Encode(Response{OK: true, State: d.state()})
	default:
		_ = enc.Encode(Response{Error: "unknown op " + req.Op})
	}
}

// teardown is disconnect: unmount the filesystems, detach the loop devices,
// unmount the FUSE files, flush every namespace (NVMe Flush) and close the
// controller (CC.SHN), in that order; then the daemon exits. If a
// filesystem cannot be unmounted (busy) the controller, the loop devices
// and the other mounts stay, and the error says what holds it
// (busyUnmountError), unless force, which detaches it lazily (umount -l).
func (d *daemon) teardown(force bool) error {
	d.stopMu.Lock()
	defer d.stopMu.Unlock()
	if d.stopped {
		return nil
	}
	left, err := d.stop(force)
	if err != nil {
		return err
	}
	d.stopped = true
	close(d.shutdown)
	if len(left) > 0 {
		return fmt.Errorf("disconnected, but left behind: %s", strings.Join(left, "; "))
	}
	return nil
}

// stop undoes start; with force it goes on past a busy mount. It returns
// what it could not take down (a mount, a loop device), after trying;
// an error means nothing was torn down (a busy mount without force).
func (d *daemon) stop(force bool) ([]string, error) {
	d.mu.Lock()
	nss := append([]hoststate.Namespace(nil), d.st.Namespaces...)
	d.mu.Unlock()
	if force && d.sub != nil && !d.anyPathLive() {
		// The target is away: fail the waiting I/O now (the filesystem
		// sees errors) instead of blocking the unmount until ctrl_loss_tmo.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.sub.Close(ctx)
		cancel()
	}
	// Every filesystem first, then the loop devices: a busy mount stops
	// the disconnect before any loop device is detached under a mount.
	var unmounted []string
	for i, n := range nss {
		switch {
		case n.Mount == "":
		case !hostfs.IsMounted(n.Mount):
			d.log.Info("already unmounted", zap.String("dir", n.Mount))
		case force:
			if err := hostfs.Unmount(n.Mount); err == nil {
				d.log.Info("unmounted", zap.String("dir", n.Mount))
				break
			}
			d.log.Warn("filesystem busy: --force unmounts it lazily; the processes using it keep it, and their I/O fails once the controller is gone",
				zap.String("dir", n.Mount), zap.Strings("busy", hostfs.BusyReason(n.Loop, n.Mount)))
			if _, err := hostfs.RunTool("umount", "-l", n.Mount); err != nil {
				d.log.Warn("lazy unmount", zap.Error(err))
			}
		default:
			if err := hostfs.Unmount(n.Mount); err != nil {
				d.mu.Lock()
				for j := range d.st.Namespaces {
					for _, u := range nss[:i] {
						if d.st.Namespaces[j].NSID == u.NSID && u.Mount == "" {
							d.st.Namespaces[j].Mount = ""
						}
					}
				}
				d.mu.Unlock()
				return nil, busyUnmountError(d.dev, n, unmounted, err)
			}
			nss[i].Mount = ""
			unmounted = append(unmounted, n.Mount)
			d.log.Info("unmounted", zap.String("dir", n.Mount))
		}
	}
	for _, n := range nss {
		if n.Loop != "" {
			if err := hostfs.DetachLoop(n.Loop); err != nil {
				d.log.Warn("detach loop", zap.Error(err))
			}
			d.log.Info("loop device detached", zap.String("loop", n.Loop))
		}
	}
	if d.ln != nil {
		d.ln.Close()
	}
	if d.metrics != nil {
		d.metrics.Close()
		d.metrics = nil
	}
	if d.srv != nil {
		fusedev.Unmount(d.srv, filepath.Join(d.store.InstanceDir(d.dev), "dev"), d.log)
	}
	var errs []error
	if d.sub != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, ns := range d.sub.Namespaces() {
			// Issue 23.15: with no usable path (a standby gateway's
			// inaccessible ANA group) the Flush waited for one until its
			// deadline. Nothing written through this host: nothing to
			// flush. Written: the Flush waits a short while for a path.
			ctx := ctx
			if !d.usablePath(ns.NSID()) {
				if !d.otherWrites.Load() && (d.root == nil || !d.root.Written(ns.NSID())) {
					d.log.Info("no flush: no usable path and nothing written through this host", zap.Uint32("nsid", ns.NSID()))
					continue
				}
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, noPathFlushWait)
				defer cancel()
				d.log.Warn("no usable path for the flush of written data: waiting for one", zap.Uint32("nsid", ns.NSID()), zap.Duration("at_most", noPathFlushWait))
			}
			if err := ns.Flush(ctx); err != nil && !errors.Is(err, initiator.ErrControllerLost) &&
				!errors.Is(err, initiator.ErrNoPath) && !errors.Is(err, initiator.ErrControllerClosed) {
				errs = append(errs, fmt.Errorf("flush namespace %d: %w", ns.NSID(), err))
			}
		}
		if err := d.sub.Close(ctx); err != nil {
			if !d.anyWritten() {
				// The controller's own closing Flush on a path whose
				// ANA group refuses I/O: nothing was written to flush.
				err = dropANAStatus(err)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		cancel()
	}
	d.saveMu.Lock()
	d.removed = true
	_ = d.store.Remove(d.dev)
	d.saveMu.Unlock()
	if len(errs) > 0 {
		d.log.Warn("disconnect", zap.Error(errors.Join(errs...)))
	}
	left := leftovers(nss)
	for _, l := range left {
		d.log.Error("left behind by disconnect", zap.String("what", l))
	}
	return left, nil
}

// anyWritten reports whether anything was written through this host.
func (d *daemon) anyWritten() bool {
	if d.otherWrites.Load() {
		return true
	}
	for _, ns := range d.sub.Namespaces() {
		if d.root != nil && d.root.Written(ns.NSID()) {
			return true
		}
	}
	return false
}

// dropANAStatus removes from err (a join of errors) those that are an
// ANA status (persistent loss, inaccessible, transition: the path may not
// carry I/O), and returns what is left, or nil.
func dropANAStatus(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var keep []error
		for _, e := range j.Unwrap() {
			if e = dropANAStatus(e); e != nil {
				keep = append(keep, e)
			}
		}
		return errors.Join(keep...)
	}
	var st nvmeof.Status
	if errors.As(err, &st) {
		switch st.Code() {
		case nvmeof.StatusANAPersistentLoss, nvmeof.StatusANAInaccessible, nvmeof.StatusANATransition:
			return nil
		}
	}
	return err
}

// noPathFlushWait bounds disconnect's Flush of a namespace that was
// written but that no path may carry now.
const noPathFlushWait = 5 * time.Second

// usablePath reports whether some path may carry namespace nsid's I/O
// now: its controller live, the namespace's ANA state optimized or
// non-optimized (NVMe Base 2.0 §8.1.3: no I/O in the inaccessible,
// persistent loss and change states).
func (d *daemon) usablePath(nsid uint32) bool {
	for _, p := range d.sub.Paths() {
		if p.Controller().State() != initiator.StateLive {
			continue
		}
		if st := p.ANAState(nsid); st == nvmeof.ANAOptimized || st == nvmeof.ANANonOptimized {
			return true
		}
	}
	return false
}

// anyPathLive reports whether some path's controller is live.
func (d *daemon) anyPathLive() bool {
	for _, p := range d.sub.Paths() {
		if p.Controller().State() == initiator.StateLive {
			return true
		}
	}
	return false
}

// leftovers lists the mounts and loop devices of nss that are still
// there, each with what is safe to do about it: a mount is unmounted once
// what uses it has stopped; a loop device still under a filesystem (a
// live mount, or one unmounted lazily that processes still use) is left
// to its autoclear, never detached by hand.
func leftovers(nss []hoststate.Namespace) []string {
	var left []string
	for _, n := range nss {
		mounted := n.Mount != "" && hostfs.IsMounted(n.Mount) && (n.Loop == "" || hostfs.MountSource(n.Mount) == n.Loop)
		if mounted {
			left = append(left, fmt.Sprintf("%s still mounted (%s): stop what uses it, then umount %s; umount -l only if you accept that their I/O fails",
				n.Mount, strings.Join(hostfs.BusyReason(n.Loop, n.Mount), "; "), n.Mount))
		}
		if n.Loop == "" || !hostfs.LoopOn(n.Loop, n.File) {
			continue
		}
		switch m := hostfs.MountOf(n.Loop); {
		case mounted || m != "":
			if m == "" {
				m = n.Mount
			}
			left = append(left, fmt.Sprintf("%s still attached to %s, under the mount %s: umount %s first; never losetup -d a loop device under a live mount", n.Loop, n.File, m, m))
		case hostfs.BlockDeviceBusy(n.Loop):
			users, _ := hostfs.Users(hostfs.FSDevice(n.Loop, ""), 10)
			who := make([]string, len(users))
			for i, u := range users {
				who[i] = u.String()
			}
			if len(who) == 0 {
				who = append(who, "no process found in this mount namespace")
			}
			left = append(left, fmt.Sprintf("%s still attached to %s: a lazily unmounted filesystem on it is still in use (%s); it detaches itself when they let go (autoclear): do not losetup -d it",
				n.Loop, n.File, strings.Join(who, "; ")))
		default:
			left = append(left, fmt.Sprintf("%s still attached to %s, nothing mounts it: losetup -d %s", n.Loop, n.File, n.Loop))
		}
	}
	return left
}

// inUse says why namespace nsid is in use on this host, or "": mounted or
// on a loop device by us, its loop device mounted by someone, or its
// device file open (a loop device attached by hand, a program).
func (d *daemon) inUse(nsid uint32) string {
	d.mu.Lock()
	var n *hoststate.Namespace
	for i := range d.st.Namespaces {
		if d.st.Namespaces[i].NSID == nsid {
			c := d.st.Namespaces[i]
			n = &c
		}
	}
	d.mu.Unlock()
	var why []string
	if n != nil && n.Mount != "" {
		why = append(why, "mounted on "+n.Mount)
	}
	if n != nil && n.Loop != "" {
		why = append(why, "attached to "+n.Loop)
		if m := hostfs.MountOf(n.Loop); m != "" && (n.Mount == "" || m != n.Mount) {
			why = append(why, n.Loop+" mounted on "+m)
		}
	}
	if d.root != nil {
		open := d.root.OpenCount(nsid)
		if n != nil && n.Loop != "" {
			open-- // the loop device's own handle
		}
		if open > 0 {
			why = append(why, fmt.Sprintf("its device file is open %d times", open))
		}
	}
	return strings.Join(why, ", ")
}

// attachedElsewhere returns an error naming the controller through which
// one of nss is already attached on this host (same NGUID or UUID): two
// controllers reaching one namespace (two ports of one subsystem) must not
// both expose it, since two filesystems mounted on one namespace destroy
// each other. Another port of the same subsystem is not refused here:
// connect adds it to the subsystem's device as a path instead.
func attachedElsewhere(s hoststate.Store, self string, nss []hoststate.Namespace) error {
	for _, dev := range s.Instances() {
		if dev == self {
			continue
		}
		st, err := s.Read(dev)
		if err != nil || !hoststate.ProcessAlive(st.PID) {
			continue
		}
		for _, o := range st.Namespaces {
			for _, n := range nss {
				same := (n.NGUID != "" && n.NGUID == o.NGUID) || (n.UUID != "" && n.UUID == o.UUID)
				if !same {
					continue
				}
				id := "nguid " + n.NGUID
				if n.NGUID == "" || n.NGUID != o.NGUID {
					id = "uuid " + n.UUID
				}
				return fmt.Errorf("namespace %d (%s) is already attached on this host as %sn%d through %s (%s); "+
					"one namespace is attached once per host (a path of the same subsystem joins its device; this is another subsystem NQN): use %s, or disconnect it first",
					n.NSID, id, dev, o.NSID, st.Address, st.SubNQN, dev)
			}
		}
	}
	return nil
}

// attachLock serializes the attach check of concurrent connects: an
// exclusive flock on RUNDIR/.attach.lock, released by the returned func.
func attachLock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".attach.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
