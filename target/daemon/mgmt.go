package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/configfile"
	"github.com/nvmetd/nvmetd/target/mgmtapi"
)

// The management API's routes and request decoding are target/mgmtapi;
// what a change does (on a copy of the running configuration, applied as a
// reload, serialized with reloads by changeMu, saved on request) is the
// daemon's, here.

// maxAPIBody bounds a request body (a whole configuration at most).
const maxAPIBody = mgmtapi.MaxBody

type (
	apiProblem   = mgmtapi.Problem
	apiError     = mgmtapi.Error
	changeResult = mgmtapi.ChangeResult
)

// routeMux is where routes are registered (mgmtapi.RouteMux).
type routeMux = mgmtapi.RouteMux

// mgmtRoutes registers the management API on mux.
func (d *daemon) mgmtRoutes(mux routeMux) { mgmtapi.Routes(mux, mgmtView{d}) }

// mgmtView is the daemon as the management API sees it.
type mgmtView struct{ d *daemon }

// The mgmtapi.Daemon methods.

func (m mgmtView) Config() *target.Config { return m.d.config().Target }

func (m mgmtView) Change(r *http.Request, what string, edit func(c *target.Config, res *changeResult) (string, error)) (any, error) {
	return m.d.change(r, what, edit)
}

func (m mgmtView) Save(r *http.Request) (any, error) {
	d := m.d
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	if err := d.persistLocked(r); err != nil {
		return nil, err
	}
	return &changeResult{Changes: []string{}, Persisted: true, File: d.config().File}, nil
}

func (m mgmtView) LogLevel() string { return m.d.level.Level().String() }

func (m mgmtView) SetLogLevel(r *http.Request, level string, l zapcore.Level) (any, error) {
	d := m.d
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	res := &changeResult{Changes: []string{}}
	cur := d.config()
	if cur.Daemon.LogLevel != level {
		lc := *cur
		lc.Daemon.LogLevel = level
		d.level.SetLevel(l)
		res.Changes = append(res.Changes, "daemon.log_level: "+cur.Daemon.LogLevel+" -> "+level)
		d.mu.Lock()
		d.cur = &lc
		d.unsaved = true
		d.logLevelSet = true
		d.lastChange = &reloadInfo{At: time.Now(), Changes: res.Changes}
		d.mu.Unlock()
		d.log.Info("management API: log level changed", zap.String("level", level))
	}
	if mgmtapi.PersistRequested(r) {
		if err := d.persistLocked(r); err != nil {
			return nil, err
		}
		res.Persisted, res.File = true, d.config().File
	}
	return res, nil
}

func (m mgmtView) Controllers() []target.ControllerStatus { return m.d.t.Status().Controllers }
func (m mgmtView) Queues() []target.QueueStatus           { return m.d.t.Queues() }
func (m mgmtView) Log() *zap.Logger                       { return m.d.log }

func (m mgmtView) Group() (*mgmtapi.GroupStatus, error) {
	if m.d.gw == nil {
		return nil, &apiError{Status: http.StatusNotFound, Message: "this nvmetd is not a member of a gateway group (no gateway section)"}
	}
	st, err := m.d.gw.GroupStatus()
	if err != nil {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Message: err.Error()}
	}
	return st, nil
}

// change applies edit to a copy of the running configuration, as a reload
// would, and persists the result if asked. edit returns the configuration
// path of the object it changed ("" if none).
func (d *daemon) change(r *http.Request, what string, edit func(c *target.Config, res *changeResult) (string, error)) (any, error) {
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	if d.stopping.Load() {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Message: "nvmetd is shutting down"}
	}
	res := &changeResult{Changes: []string{}}
	cur := d.config()
	nc := cur.Target.Clone()
	prefix, err := edit(nc, res)
	if err != nil {
		return nil, mgmtapi.ToError(err, prefix)
	}
	nc.ApplyDefaults()
	if err := nc.Validate(); err != nil {
		return nil, mgmtapi.ToError(err, prefix)
	}
	// What only spells out what the target already serves (a restored
	// export's identifiers, must_exist, default ANA states) changes nothing.
	if k, ok := d.t.(interface{ KeepRunningEquivalents(*target.Config) }); ok {
		k.KeepRunningEquivalents(nc)
	}
	diff := target.Diff(cur.Target, nc)
	res.Changes = append(res.Changes, diff.Summary()...)
	// In a gateway group whose configuration is in RADOS, a change of
	// the group's part is checked for the whole group, applied here
	// (the path that serves: storage that does not open refuses it), and
	// only then stored, by a compare-and-set on its base version; a lost
	// race undoes it here. The other gateways apply it from RADOS.
	var base uint64
	var doc []byte
	if !d.gw.RADOSHeld() && r.URL.Query().Get("group_version") != "" {
		// A change meant for the whole group must never change only
		// this gateway.
		return nil, &apiError{Status: http.StatusConflict,
			Message: "group_version: this nvmetd holds no gateway group configuration in RADOS (gateway.group_config: rados); a change for the whole group is refused"}
	}
	if d.gw.RADOSHeld() {
		base = d.gw.GroupVersion()
		if q := r.URL.Query().Get("group_version"); q != "" {
			b, err := strconv.ParseUint(q, 10, 64)
			if err != nil {
				return nil, &apiError{Status: http.StatusBadRequest, Message: "group_version: " + err.Error()}
			}
			base = b
		}
		var err error
		var merged *target.Config
		doc, merged, err = d.gw.PrepareChange(base, nc)
		if err != nil {
			return nil, groupError(d, err, base)
		}
		// Served here as every other gateway serves the stored version:
		// with this gateway's ports and CNTLID ranges.
		nc = merged
		diff = target.Diff(cur.Target, nc)
		res.Changes = diff.Summary()
		res.GroupVersion = base
	}
	if !diff.Empty() {
		info := &reloadInfo{At: time.Now(), Changes: res.Changes}
		d.log.Info("management API: "+what, zap.Strings("changes", res.Changes))
		err := d.t.Reload(d.targetConfig(nc))
		var ve *target.ValidationError
		if errors.Is(err, target.ErrReloadRefused) || errors.As(err, &ve) {
			// Refused before anything changed (storage that does not
			// open, an address that does not listen; or, defensively, a
			// validation the target repeats).
			d.log.Error("management API: refused, nothing changed:\n  " + indent(err.Error()))
			ae := mgmtapi.ToError(err, prefix)
			if ae.Status == http.StatusInternalServerError {
				ae.Status = http.StatusBadRequest
			}
			if errors.Is(err, target.ErrGatewayGuard) {
				// The change conflicts with the gateway group: a
				// namespace outside its ANA groups, or an image
				// without the exclusive-lock feature.
				ae.Status = http.StatusConflict
			}
			ae.Message = err.Error()
			return nil, ae
		}
		if doc != nil {
			v, serr := d.gw.StoreChange(base, doc)
			if serr != nil {
				// Not stored: undo it here (the running
				// configuration of record is still cur).
				if uerr := d.t.Reload(d.targetConfig(cur.Target)); uerr != nil {
					d.log.Error("management API: undoing a change the group did not store", zap.Error(uerr))
				}
				return nil, groupError(d, serr, base)
			}
			res.GroupVersion = v
			d.log.Info("management API: stored the group configuration", zap.Uint64("version", v), zap.Uint64("base", base))
		}
		lc := *cur
		lc.Target = nc
		lc.Warnings = append(nc.Warnings(), unknownEnv(os.Environ())...)
		// The warnings the change brings (not those already there).
		old := cur.Target.Warnings()
		for _, w := range nc.Warnings() {
			if !slices.Contains(old, w) {
				res.Warnings = append(res.Warnings, w)
			}
		}
		if err != nil {
			info.Error = err.Error()
		}
		d.mu.Lock()
		d.cur = &lc
		if doc == nil {
			// A change of the group's part (doc) has its record in
			// RADOS, stored above: a reload keeps it, so the file does
			// not lag behind it.
			d.unsaved = true
		}
		d.lastChange = info
		d.mu.Unlock()
		if doc != nil {
			d.gw.Applied(res.GroupVersion, nc)
		}
		if err != nil {
			d.log.Error("management API: the target could not apply everything", zap.Error(err))
			return nil, &apiError{Status: http.StatusInternalServerError, Applied: true, Message: "applied with errors: " + err.Error()}
		}
	}
	if mgmtapi.PersistRequested(r) {
		if doc != nil {
			// The group's configuration of record is its stored
			// version; the file keeps only this gateway's own parts
			// (its subsystems would seed nothing: version 1 exists).
			res.Warnings = append(res.Warnings, fmt.Sprintf("not persisted to the file: the change is the gateway group's, "+
				"stored in RADOS as version %d, its record (the file keeps this gateway's own parts)", res.GroupVersion))
		} else {
			if err := d.persistLocked(r); err != nil {
				return nil, err
			}
			res.Persisted, res.File = true, d.config().File
		}
	}
	return res, nil
}

// groupError is the API's answer to a change of the group's configuration
// refused for the group (nothing stored): 409 when the stored version is
// not its base (with the current one), 400 when it is invalid for the
// group, 503 when the cluster could not be read or written.
func groupError(d *daemon, err error, base uint64) error {
	var vc *gwtarget.GroupConflict
	switch {
	case errors.As(err, &vc):
		d.log.Info("management API: refused, the group configuration changed meanwhile", zap.Error(err))
		return &apiError{Status: http.StatusConflict, Message: err.Error(), GroupVersion: vc.Current}
	case errors.Is(err, gwtarget.ErrGroupInvalid):
		d.log.Info("management API: refused for the group, nothing stored", zap.Error(err))
		return &apiError{Status: http.StatusBadRequest, Message: err.Error(), GroupVersion: base}
	}
	return &apiError{Status: http.StatusServiceUnavailable, Message: "the group configuration: " + err.Error(), GroupVersion: base}
}

// persistLocked writes the running configuration into the configuration
// file and checks that the daemon's loader reads it back the same.
// changeMu is held.
func (d *daemon) persistLocked(r *http.Request) error {
	cur := d.config()
	if cur.File == "" {
		return &apiError{Status: http.StatusConflict, Applied: true,
			Message: "no configuration file to persist to (nvmetd runs the built-in default; start it with --config FILE)"}
	}
	force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	level := ""
	d.mu.Lock()
	if d.logLevelSet {
		level = cur.Daemon.LogLevel
	}
	d.mu.Unlock()
	sum, err := configfile.Save(cur.File, cur.FileSum, force, cur.Target, level)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, configfile.ErrChanged) {
			status = http.StatusConflict
		}
		return &apiError{Status: status, Applied: true, Message: "not persisted: " + err.Error()}
	}
	lc := *cur
	lc.FileSum = sum
	d.mu.Lock()
	d.cur = &lc
	d.unsaved = false
	d.mu.Unlock()
	d.log.Info("management API: configuration saved", zap.String("file", cur.File))
	// The file must read back as what runs.
	back, err := d.load()
	if err != nil {
		return &apiError{Status: http.StatusInternalServerError, Applied: true, Message: "persisted, but the file does not load: " + err.Error()}
	}
	if diff := target.Diff(back.Target, cur.Target); !diff.Empty() {
		return &apiError{Status: http.StatusInternalServerError, Applied: true, Message: "persisted, but the file reads back differently: " + diff.String()}
	}
	return nil
}
