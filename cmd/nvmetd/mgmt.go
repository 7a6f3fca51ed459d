package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"

	"github.com/nvmetd/nvmetd/target/configfile"
)

// The management API: HTTP/JSON on the control socket, described in
// docs/api.yaml (OpenAPI 3; TestOpenAPIInSync keeps the two together).
// Every change is made on a copy of the running configuration and applied
// exactly as a reload of a file with that content would be: the same
// validation (target.Config.Validate), the same plan and apply
// (target.Target.Reload), the same notices to hosts. A refused change
// names the field and changes nothing. Changes and reloads (SIGHUP) are
// serialized (daemon.changeMu). ?persist=true (or POST /v1/save) writes the
// result back into the configuration file, atomically; until then a SIGHUP
// re-reads the file and undoes the API's changes (status says
// unsaved_changes).

// maxAPIBody bounds a request body (a whole configuration at most).
const maxAPIBody = maxConfigFile

// The API's answers are internal/ctlclient's types, which nvmetctl
// decodes.
type (
	apiProblem   = ctlclient.Problem
	apiError     = ctlclient.Error
	changeResult = ctlclient.ChangeResult
)

// apiHandler answers a request with a value to encode, or an error.
type apiHandler func(r *http.Request) (any, error)

// serveAPI wraps h: JSON answers, errors as apiError with their status.
func (d *daemon) serveAPI(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxAPIBody)
		v, err := h(r)
		status := http.StatusOK
		if err != nil {
			ae := toAPIError(err, "")
			status, v = ae.Status, ae
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			d.log.Debug("control: writing an answer", zap.Error(err))
		}
	}
}

// toAPIError converts an error of an edit, a decode or a validation. prefix
// is the configuration path of the object the request is about ("" if
// none): problems under it are named relative to it.
func toAPIError(err error, prefix string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if ee, ok := target.AsEditError(err); ok {
		status := http.StatusBadRequest
		switch ee.Kind {
		case target.EditNotFound:
			status = http.StatusNotFound
		case target.EditExists:
			status = http.StatusConflict
		}
		return &apiError{Status: status, Message: ee.Error(), Problems: []apiProblem{{Field: ee.Field, Reason: ee.Reason}}}
	}
	var ve *target.ValidationError
	if errors.As(err, &ve) {
		ae := &apiError{Status: http.StatusBadRequest, Message: "invalid: nothing changed"}
		var lines []string
		for _, p := range ve.Problems {
			ap := apiProblem{ConfigField: p.Field, Field: p.Field, Reason: p.Reason}
			if prefix != "" {
				if rel, ok := strings.CutPrefix(p.Field, prefix+"."); ok {
					ap.Field = rel
				} else if p.Field == prefix {
					ap.Field = ""
				}
			}
			ae.Problems = append(ae.Problems, ap)
			lines = append(lines, p.Error())
		}
		ae.Message = "invalid, nothing changed: " + strings.Join(lines, "; ")
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: err.Error()}
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
}

// decodeProblems names decode problems inside the request body: their
// fields are already relative to the object; prefix gives the
// configuration path.
func bodyError(err error, prefix string) error {
	var ve *target.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	ae := toAPIError(err, "")
	if prefix != "" {
		for i := range ae.Problems {
			if ae.Problems[i].Field != "" {
				ae.Problems[i].ConfigField = prefix + "." + ae.Problems[i].Field
			}
		}
	}
	return ae
}

// readBody decodes the request's JSON object.
func readBody(r *http.Request) (map[string]any, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return map[string]any{}, nil
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf("the body is not a JSON object: %v", err)}
	}
	return m, nil
}

// decodeNew decodes the body into a new configuration value.
func decodeNew[T any](r *http.Request) (T, error) {
	var v T
	m, err := readBody(r)
	if err != nil {
		return v, err
	}
	if err := target.DecodeMap(m, &v); err != nil {
		return v, bodyError(err, "")
	}
	return v, nil
}

// patch decodes body m onto *v (keys absent stay), refusing the keys of
// fixed (identity) that differ... fixed keys may be repeated unchanged.
func patch[T any](m map[string]any, v *T, prefix string, fixed ...string) error {
	before := target.EncodeJSON(*v).(map[string]any)
	for _, k := range fixed {
		if x, ok := m[k]; ok && fmt.Sprint(x) != fmt.Sprint(before[k]) {
			return &apiError{Status: http.StatusBadRequest, Message: k + ": cannot be changed (remove and add instead)",
				Problems: []apiProblem{{Field: k, ConfigField: prefix + "." + k, Reason: "cannot be changed (remove and add instead)"}}}
		}
	}
	if err := target.DecodeMap(m, v); err != nil {
		return bodyError(err, prefix)
	}
	return nil
}

func persistRequested(r *http.Request) bool {
	b, _ := strconv.ParseBool(r.URL.Query().Get("persist"))
	return b
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
		return nil, toAPIError(err, prefix)
	}
	nc.ApplyDefaults()
	if err := nc.Validate(); err != nil {
		return nil, toAPIError(err, prefix)
	}
	// What only spells out what the target already serves (a restored
	// export's identifiers, must_exist, default ANA states) changes nothing.
	if k, ok := d.t.(interface{ KeepRunningEquivalents(*target.Config) }); ok {
		k.KeepRunningEquivalents(nc)
	}
	diff := target.Diff(cur.Target, nc)
	res.Changes = append(res.Changes, diff.Summary()...)
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
			ae := toAPIError(err, prefix)
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
		d.unsaved = true
		d.lastChange = info
		d.mu.Unlock()
		if err != nil {
			d.log.Error("management API: the target could not apply everything", zap.Error(err))
			return nil, &apiError{Status: http.StatusInternalServerError, Applied: true, Message: "applied with errors: " + err.Error()}
		}
	}
	if persistRequested(r) {
		if err := d.persistLocked(r); err != nil {
			return nil, err
		}
		res.Persisted, res.File = true, d.config().File
	}
	return res, nil
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

// routeMux is where routes are registered (an *http.ServeMux; a recorder
// in the test that compares them with docs/api.yaml).
type routeMux interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// mgmtRoutes registers the management API on mux.
func (d *daemon) mgmtRoutes(mux routeMux) {
	handle := func(pattern string, h apiHandler) { mux.HandleFunc(pattern, d.serveAPI(h)) }
	cfg := func() *target.Config { return d.config().Target }

	// The whole configuration: read, restore (replace), clear, save.
	handle("GET /v1/config", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg()), nil })
	handle("PUT /v1/config", func(r *http.Request) (any, error) {
		m, err := readBody(r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "restore", func(c *target.Config, _ *changeResult) (string, error) {
			c.Clear()
			if err := target.DecodeMap(m, c); err != nil {
				return "", bodyError(err, "")
			}
			return "", nil
		})
	})
	handle("DELETE /v1/config", func(r *http.Request) (any, error) {
		return d.change(r, "clear", func(c *target.Config, _ *changeResult) (string, error) {
			c.Clear()
			return "", nil
		})
	})
	handle("POST /v1/save", func(r *http.Request) (any, error) {
		d.changeMu.Lock()
		defer d.changeMu.Unlock()
		if err := d.persistLocked(r); err != nil {
			return nil, err
		}
		return &changeResult{Changes: []string{}, Persisted: true, File: d.config().File}, nil
	})

	// Ports.
	handle("GET /v1/ports", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Ports), nil })
	handle("POST /v1/ports", func(r *http.Request) (any, error) {
		pc, err := decodeNew[target.PortConfig](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "add port", func(c *target.Config, res *changeResult) (string, error) {
			path, err := c.AddPort(pc)
			if err == nil {
				res.PortID = c.Ports[len(c.Ports)-1].ID
			}
			return path, err
		})
	})
	handle("GET /v1/ports/{id}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		c := cfg()
		i := c.PortIndex(id)
		if i < 0 {
			return nil, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no port %d", id)}
		}
		return target.EncodeJSON(c.Ports[i]), nil
	})
	handle("PATCH /v1/ports/{id}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		m, err := readBody(r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "modify port", func(c *target.Config, _ *changeResult) (string, error) {
			i := c.PortIndex(id)
			if i < 0 {
				return "", &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no port %d", id)}
			}
			prefix := fmt.Sprintf("ports[%d]", i)
			return prefix, patch(m, &c.Ports[i], prefix, "id")
		})
	})
	handle("DELETE /v1/ports/{id}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.change(r, "remove port", func(c *target.Config, _ *changeResult) (string, error) { return "", c.RemovePort(id) })
	})
	handle("PUT /v1/ports/{id}/subsystems/{nqn}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.change(r, "link subsystem", func(c *target.Config, _ *changeResult) (string, error) {
			return c.LinkSubsystem(id, r.PathValue("nqn"))
		})
	})
	handle("DELETE /v1/ports/{id}/subsystems/{nqn}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.change(r, "unlink subsystem", func(c *target.Config, _ *changeResult) (string, error) {
			return "", c.UnlinkSubsystem(id, r.PathValue("nqn"))
		})
	})
	handle("PUT /v1/ports/{id}/ana_groups/{group}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		group, err := strconv.ParseUint(r.PathValue("group"), 10, 32)
		if err != nil {
			return nil, &apiError{Status: http.StatusBadRequest, Message: "group: not a number",
				Problems: []apiProblem{{Field: "group", Reason: "not a number"}}}
		}
		body, err := decodeNew[struct {
			State string `mapstructure:"state"`
		}](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "set ANA state", func(c *target.Config, _ *changeResult) (string, error) {
			return c.SetANAState(id, uint32(group), body.State)
		})
	})

	// Subsystems and their namespaces and allowed hosts.
	handle("GET /v1/subsystems", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Subsystems), nil })
	handle("POST /v1/subsystems", func(r *http.Request) (any, error) {
		sc, err := decodeNew[target.SubsystemConfig](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "add subsystem", func(c *target.Config, _ *changeResult) (string, error) { return c.AddSubsystem(sc) })
	})
	subsystem := func(r *http.Request) (*target.SubsystemConfig, error) {
		c := cfg()
		i := c.SubsystemIndex(r.PathValue("nqn"))
		if i < 0 {
			return nil, &apiError{Status: http.StatusNotFound, Message: "no subsystem " + r.PathValue("nqn")}
		}
		return &c.Subsystems[i], nil
	}
	handle("GET /v1/subsystems/{nqn}", func(r *http.Request) (any, error) {
		s, err := subsystem(r)
		if err != nil {
			return nil, err
		}
		return target.EncodeJSON(*s), nil
	})
	handle("PATCH /v1/subsystems/{nqn}", func(r *http.Request) (any, error) {
		m, err := readBody(r)
		if err != nil {
			return nil, err
		}
		if _, ok := m["namespaces"]; ok {
			return nil, &apiError{Status: http.StatusBadRequest, Message: "namespaces: change them with /v1/subsystems/{nqn}/namespaces",
				Problems: []apiProblem{{Field: "namespaces", Reason: "change them with /v1/subsystems/{nqn}/namespaces"}}}
		}
		nqn := r.PathValue("nqn")
		return d.change(r, "modify subsystem", func(c *target.Config, _ *changeResult) (string, error) {
			i := c.SubsystemIndex(nqn)
			if i < 0 {
				return "", &apiError{Status: http.StatusNotFound, Message: "no subsystem " + nqn}
			}
			prefix := fmt.Sprintf("subsystems[%d]", i)
			return prefix, patch(m, &c.Subsystems[i], prefix, "nqn")
		})
	})
	handle("DELETE /v1/subsystems/{nqn}", func(r *http.Request) (any, error) {
		return d.change(r, "remove subsystem", func(c *target.Config, _ *changeResult) (string, error) {
			return "", c.RemoveSubsystem(r.PathValue("nqn"))
		})
	})
	handle("GET /v1/subsystems/{nqn}/namespaces", func(r *http.Request) (any, error) {
		s, err := subsystem(r)
		if err != nil {
			return nil, err
		}
		return target.EncodeJSON(s.Namespaces), nil
	})
	handle("POST /v1/subsystems/{nqn}/namespaces", func(r *http.Request) (any, error) {
		nc, err := decodeNew[target.NamespaceConfig](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "add namespace", func(c *target.Config, res *changeResult) (string, error) {
			path, nsid, err := c.AddNamespace(r.PathValue("nqn"), nc)
			res.NSID = nsid
			return path, err
		})
	})
	handle("GET /v1/subsystems/{nqn}/namespaces/{nsid}", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		n, _, err := cfg().Namespace(r.PathValue("nqn"), nsid)
		if err != nil {
			return nil, err
		}
		return target.EncodeJSON(*n), nil
	})
	handle("PATCH /v1/subsystems/{nqn}/namespaces/{nsid}", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		m, err := readBody(r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "modify namespace", func(c *target.Config, _ *changeResult) (string, error) {
			n, prefix, err := c.Namespace(r.PathValue("nqn"), nsid)
			if err != nil {
				return "", err
			}
			return prefix, patch(m, n, prefix, "nsid")
		})
	})
	handle("DELETE /v1/subsystems/{nqn}/namespaces/{nsid}", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		return d.change(r, "remove namespace", func(c *target.Config, _ *changeResult) (string, error) {
			return "", c.RemoveNamespace(r.PathValue("nqn"), nsid)
		})
	})
	handle("POST /v1/subsystems/{nqn}/namespaces/{nsid}/resize", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		body, err := decodeNew[struct {
			Size string `mapstructure:"size"`
		}](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "resize namespace", func(c *target.Config, _ *changeResult) (string, error) {
			path, err := c.ResizeNamespace(r.PathValue("nqn"), nsid, body.Size)
			if err != nil {
				return path, err
			}
			return path + ".backend", nil // "size" names the parameter
		})
	})
	handle("PUT /v1/subsystems/{nqn}/hosts/{host}", func(r *http.Request) (any, error) {
		return d.change(r, "allow host", func(c *target.Config, _ *changeResult) (string, error) {
			return c.AllowHost(r.PathValue("nqn"), r.PathValue("host"))
		})
	})
	handle("DELETE /v1/subsystems/{nqn}/hosts/{host}", func(r *http.Request) (any, error) {
		return d.change(r, "disallow host", func(c *target.Config, _ *changeResult) (string, error) {
			return "", c.DisallowHost(r.PathValue("nqn"), r.PathValue("host"))
		})
	})

	// Known hosts.
	handle("GET /v1/hosts", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Hosts), nil })
	handle("POST /v1/hosts", func(r *http.Request) (any, error) {
		hc, err := decodeNew[target.HostConfig](r)
		if err != nil {
			return nil, err
		}
		return d.change(r, "add host", func(c *target.Config, _ *changeResult) (string, error) { return c.AddHost(hc) })
	})
	handle("GET /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		c := cfg()
		i := c.HostIndex(r.PathValue("nqn"))
		if i < 0 {
			return nil, &apiError{Status: http.StatusNotFound, Message: "no host " + r.PathValue("nqn")}
		}
		return target.EncodeJSON(c.Hosts[i]), nil
	})
	handle("PATCH /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		m, err := readBody(r)
		if err != nil {
			return nil, err
		}
		nqn := r.PathValue("nqn")
		return d.change(r, "modify host", func(c *target.Config, _ *changeResult) (string, error) {
			i := c.HostIndex(nqn)
			if i < 0 {
				return "", &apiError{Status: http.StatusNotFound, Message: "no host " + nqn}
			}
			prefix := fmt.Sprintf("hosts[%d]", i)
			return prefix, patch(m, &c.Hosts[i], prefix, "nqn")
		})
	})
	handle("DELETE /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		return d.change(r, "remove host", func(c *target.Config, _ *changeResult) (string, error) {
			return "", c.RemoveHost(r.PathValue("nqn"))
		})
	})

	// The log level (daemon.log_level).
	handle("GET /v1/log_level", func(r *http.Request) (any, error) {
		return map[string]string{"level": d.level.Level().String()}, nil
	})
	handle("PUT /v1/log_level", func(r *http.Request) (any, error) {
		body, err := decodeNew[struct {
			Level string `mapstructure:"level"`
		}](r)
		if err != nil {
			return nil, err
		}
		l, err := zapcore.ParseLevel(body.Level)
		if err != nil || body.Level == "" || !slices.Contains([]string{"debug", "info", "warn", "error"}, body.Level) {
			return nil, &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf("level: %q is not one of debug, info, warn, error", body.Level),
				Problems: []apiProblem{{Field: "level", ConfigField: "daemon.log_level", Reason: "not one of debug, info, warn, error"}}}
		}
		d.changeMu.Lock()
		defer d.changeMu.Unlock()
		res := &changeResult{Changes: []string{}}
		cur := d.config()
		if cur.Daemon.LogLevel != body.Level {
			lc := *cur
			lc.Daemon.LogLevel = body.Level
			d.level.SetLevel(l)
			res.Changes = append(res.Changes, "daemon.log_level: "+cur.Daemon.LogLevel+" -> "+body.Level)
			d.mu.Lock()
			d.cur = &lc
			d.unsaved = true
			d.logLevelSet = true
			d.lastChange = &reloadInfo{At: time.Now(), Changes: res.Changes}
			d.mu.Unlock()
			d.log.Info("management API: log level changed", zap.String("level", body.Level))
		}
		if persistRequested(r) {
			if err := d.persistLocked(r); err != nil {
				return nil, err
			}
			res.Persisted, res.File = true, d.config().File
		}
		return res, nil
	})

	// Controllers and queues with their statistics.
	handle("GET /v1/controllers", func(r *http.Request) (any, error) {
		list := d.t.Status().Controllers
		if list == nil {
			list = []target.ControllerStatus{}
		}
		return list, nil
	})
	handle("GET /v1/queues", func(r *http.Request) (any, error) {
		list := d.t.Queues()
		if list == nil {
			list = []target.QueueStatus{}
		}
		return list, nil
	})
}
