// Package mgmtapi is nvmetd's management API: HTTP/JSON on the control
// socket, described in docs/api.yaml (OpenAPI 3; TestOpenAPIInSync in
// target/daemon keeps the two together): the routes, the decoding of
// requests and the errors they answer. What a change does is the
// daemon's (Daemon.Change).
//
// Every change is made on a copy of the running configuration and applied
// exactly as a reload of a file with that content would be: the same
// validation (target.Config.Validate), the same plan and apply
// (target.Target.Reload), the same notices to hosts. A refused change
// names the field and changes nothing. Changes and reloads (SIGHUP) are
// serialized (daemon.changeMu). ?persist=true (or POST /v1/save) writes the
// result back into the configuration file, atomically; until then a SIGHUP
// re-reads the file and undoes the API's changes (status says
// unsaved_changes).
package mgmtapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/configfile"
)

// Daemon is what the API needs of the daemon that runs the target.
type Daemon interface {
	// Config is the running target configuration.
	Config() *target.Config
	// Change applies edit to a copy of the running configuration, as a
	// reload would, and saves the result if r asks (PersistRequested).
	// edit returns the configuration path of the object it changed.
	Change(r *http.Request, what string, edit func(c *target.Config, res *ChangeResult) (string, error)) (any, error)
	// Save writes the running configuration into its file.
	Save(r *http.Request) (any, error)
	// LogLevel is the daemon's log level; SetLogLevel sets it (level, a
	// valid name, parsed as l) and saves it if r asks.
	LogLevel() string
	SetLogLevel(r *http.Request, level string, l zapcore.Level) (any, error)
	// Controllers and Queues are the target's, with their statistics.
	Controllers() []target.ControllerStatus
	Queues() []target.QueueStatus
	// Log is the daemon's logger.
	Log() *zap.Logger
	// Group is the gateway group's configuration held in RADOS: its
	// stored version and each member's running one (an *Error 404 when
	// this nvmetd holds none).
	Group() (*GroupStatus, error)
	// SetPreferred makes gateway name the preferred owner of the group's
	// ANA group id, and Drain drains (or undrains) gateway name: each a
	// version of the gateway group's configuration held in RADOS
	// (?group_version= its base).
	SetPreferred(r *http.Request, id uint32, name string) (any, error)
	Drain(r *http.Request, name string, drain bool) (any, error)
	// SetANAGroup changes ANA group id's preferred owner (if preferred is
	// not empty) and whether it is pinned (never moved by rebalancing),
	// in one version.
	SetANAGroup(r *http.Request, id uint32, preferred string, pinned bool) (any, error)
	// SpreadANAGroup is the ANA group of a namespace added to c without
	// one: in a gateway group, the group's ANA group with the fewest
	// namespaces; 0 (the default group) for a stand-alone nvmetd.
	SpreadANAGroup(c *target.Config) uint32
}

// MaxBody bounds a request body (a whole configuration at most).
const MaxBody = configfile.MaxSize

// The API's answers are internal/ctlclient's types, which nvmetctl
// decodes.
type (
	// Problem is one field's problem in an Error.
	Problem = ctlclient.Problem
	// Error is a refused request: its HTTP status, message and problems.
	Error = ctlclient.Error
	// ChangeResult is the answer to a change.
	ChangeResult = ctlclient.ChangeResult
	// GroupStatus is the answer of GET /v1/group.
	GroupStatus = ctlclient.GroupStatus
)

// Handler answers a request with a value to encode, or an error.
type Handler func(r *http.Request) (any, error)

// Serve wraps h: JSON answers, errors as Error with their status; log
// (called at answer time) is told of an answer it could not write.
func Serve(log func() *zap.Logger, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		v, err := h(r)
		status := http.StatusOK
		if err != nil {
			ae := ToError(err, "")
			status, v = ae.Status, ae
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			log().Debug("control: writing an answer", zap.Error(err))
		}
	}
}

// ToError converts an error of an edit, a decode or a validation. prefix
// is the configuration path of the object the request is about ("" if
// none): problems under it are named relative to it.
func ToError(err error, prefix string) *Error {
	var ae *Error
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
		return &Error{Status: status, Message: ee.Error(), Problems: []Problem{{Field: ee.Field, Reason: ee.Reason}}}
	}
	var ve *target.ValidationError
	if errors.As(err, &ve) {
		ae := &Error{Status: http.StatusBadRequest, Message: "invalid: nothing changed"}
		var lines []string
		for _, p := range ve.Problems {
			ap := Problem{ConfigField: p.Field, Field: p.Field, Reason: p.Reason}
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
		return &Error{Status: http.StatusRequestEntityTooLarge, Message: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Message: err.Error()}
}

// BodyError names decode problems inside the request body: their
// fields are already relative to the object; prefix gives the
// configuration path.
func BodyError(err error, prefix string) error {
	var ve *target.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	ae := ToError(err, "")
	if prefix != "" {
		for i := range ae.Problems {
			if ae.Problems[i].Field != "" {
				ae.Problems[i].ConfigField = prefix + "." + ae.Problems[i].Field
			}
		}
	}
	return ae
}

// ReadBody decodes the request's JSON object.
func ReadBody(r *http.Request) (map[string]any, error) {
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
		return nil, &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("the body is not a JSON object: %v", err)}
	}
	return m, nil
}

// DecodeNew decodes the body into a new configuration value.
func DecodeNew[T any](r *http.Request) (T, error) {
	var v T
	m, err := ReadBody(r)
	if err != nil {
		return v, err
	}
	if err := target.DecodeMap(m, &v); err != nil {
		return v, BodyError(err, "")
	}
	return v, nil
}

// Patch decodes body m onto *v (keys absent stay), refusing the keys of
// fixed (identity) that differ... fixed keys may be repeated unchanged.
func Patch[T any](m map[string]any, v *T, prefix string, fixed ...string) error {
	before := target.EncodeJSON(*v).(map[string]any)
	for _, k := range fixed {
		if x, ok := m[k]; ok && fmt.Sprint(x) != fmt.Sprint(before[k]) {
			return &Error{Status: http.StatusBadRequest, Message: k + ": cannot be changed (remove and add instead)",
				Problems: []Problem{{Field: k, ConfigField: prefix + "." + k, Reason: "cannot be changed (remove and add instead)"}}}
		}
	}
	if err := target.DecodeMap(m, v); err != nil {
		return BodyError(err, prefix)
	}
	return nil
}

// PersistRequested says whether the request asks for the change to be
// saved into the configuration file (?persist=true).
func PersistRequested(r *http.Request) bool {
	b, _ := strconv.ParseBool(r.URL.Query().Get("persist"))
	return b
}

// RouteMux is where routes are registered (an *http.ServeMux; a recorder
// in the test that compares them with docs/api.yaml).
type RouteMux interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Routes registers the management API of daemon d on mux.
func Routes(mux RouteMux, d Daemon) {
	handle := func(pattern string, h Handler) { mux.HandleFunc(pattern, Serve(d.Log, h)) }
	cfg := d.Config

	// The whole configuration: read, restore (replace), clear, save.
	handle("GET /v1/config", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg()), nil })
	handle("PUT /v1/config", func(r *http.Request) (any, error) {
		m, err := ReadBody(r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "restore", func(c *target.Config, _ *ChangeResult) (string, error) {
			c.Clear()
			if err := target.DecodeMap(m, c); err != nil {
				return "", BodyError(err, "")
			}
			return "", nil
		})
	})
	handle("DELETE /v1/config", func(r *http.Request) (any, error) {
		return d.Change(r, "clear", func(c *target.Config, _ *ChangeResult) (string, error) {
			c.Clear()
			return "", nil
		})
	})
	handle("POST /v1/save", func(r *http.Request) (any, error) { return d.Save(r) })

	// Ports.
	handle("GET /v1/ports", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Ports), nil })
	handle("POST /v1/ports", func(r *http.Request) (any, error) {
		pc, err := DecodeNew[target.PortConfig](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "add port", func(c *target.Config, res *ChangeResult) (string, error) {
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
			return nil, &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no port %d", id)}
		}
		return target.EncodeJSON(c.Ports[i]), nil
	})
	handle("PATCH /v1/ports/{id}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		m, err := ReadBody(r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "modify port", func(c *target.Config, _ *ChangeResult) (string, error) {
			i := c.PortIndex(id)
			if i < 0 {
				return "", &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no port %d", id)}
			}
			prefix := fmt.Sprintf("ports[%d]", i)
			return prefix, Patch(m, &c.Ports[i], prefix, "id")
		})
	})
	handle("DELETE /v1/ports/{id}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.Change(r, "remove port", func(c *target.Config, _ *ChangeResult) (string, error) { return "", c.RemovePort(id) })
	})
	handle("PUT /v1/ports/{id}/subsystems/{nqn}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.Change(r, "link subsystem", func(c *target.Config, _ *ChangeResult) (string, error) {
			return c.LinkSubsystem(id, r.PathValue("nqn"))
		})
	})
	handle("DELETE /v1/ports/{id}/subsystems/{nqn}", func(r *http.Request) (any, error) {
		id, err := target.ParsePortID(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return d.Change(r, "unlink subsystem", func(c *target.Config, _ *ChangeResult) (string, error) {
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
			return nil, &Error{Status: http.StatusBadRequest, Message: "group: not a number",
				Problems: []Problem{{Field: "group", Reason: "not a number"}}}
		}
		body, err := DecodeNew[struct {
			State string `mapstructure:"state"`
		}](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "set ANA state", func(c *target.Config, _ *ChangeResult) (string, error) {
			return c.SetANAState(id, uint32(group), body.State)
		})
	})

	// The gateway group's configuration (gateway.group_config: rados).
	handle("GET /v1/group", func(r *http.Request) (any, error) { return d.Group() })
	handle("PUT /v1/group/ana_groups/{id}", func(r *http.Request) (any, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
		if err != nil {
			return nil, &Error{Status: http.StatusBadRequest, Message: "id: not a number",
				Problems: []Problem{{Field: "id", Reason: "not a number"}}}
		}
		body, err := DecodeNew[struct {
			Preferred string `mapstructure:"preferred"`
			Pinned    *bool  `mapstructure:"pinned"`
		}](r)
		if err != nil {
			return nil, err
		}
		if body.Pinned != nil {
			return d.SetANAGroup(r, uint32(id), body.Preferred, *body.Pinned)
		}
		if body.Preferred == "" {
			return nil, &Error{Status: http.StatusBadRequest, Message: "preferred or pinned: required",
				Problems: []Problem{{Field: "preferred", Reason: "required"}}}
		}
		return d.SetPreferred(r, uint32(id), body.Preferred)
	})
	handle("POST /v1/gateways/{name}/drain", func(r *http.Request) (any, error) { return d.Drain(r, r.PathValue("name"), true) })
	handle("POST /v1/gateways/{name}/undrain", func(r *http.Request) (any, error) { return d.Drain(r, r.PathValue("name"), false) })

	// Subsystems and their namespaces and allowed hosts.
	handle("GET /v1/subsystems", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Subsystems), nil })
	handle("POST /v1/subsystems", func(r *http.Request) (any, error) {
		sc, err := DecodeNew[target.SubsystemConfig](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "add subsystem", func(c *target.Config, _ *ChangeResult) (string, error) { return c.AddSubsystem(sc) })
	})
	subsystem := func(r *http.Request) (*target.SubsystemConfig, error) {
		c := cfg()
		i := c.SubsystemIndex(r.PathValue("nqn"))
		if i < 0 {
			return nil, &Error{Status: http.StatusNotFound, Message: "no subsystem " + r.PathValue("nqn")}
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
		m, err := ReadBody(r)
		if err != nil {
			return nil, err
		}
		if _, ok := m["namespaces"]; ok {
			return nil, &Error{Status: http.StatusBadRequest, Message: "namespaces: change them with /v1/subsystems/{nqn}/namespaces",
				Problems: []Problem{{Field: "namespaces", Reason: "change them with /v1/subsystems/{nqn}/namespaces"}}}
		}
		nqn := r.PathValue("nqn")
		return d.Change(r, "modify subsystem", func(c *target.Config, _ *ChangeResult) (string, error) {
			i := c.SubsystemIndex(nqn)
			if i < 0 {
				return "", &Error{Status: http.StatusNotFound, Message: "no subsystem " + nqn}
			}
			prefix := fmt.Sprintf("subsystems[%d]", i)
			return prefix, Patch(m, &c.Subsystems[i], prefix, "nqn")
		})
	})
	handle("DELETE /v1/subsystems/{nqn}", func(r *http.Request) (any, error) {
		return d.Change(r, "remove subsystem", func(c *target.Config, _ *ChangeResult) (string, error) {
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
		nc, err := DecodeNew[target.NamespaceConfig](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "add namespace", func(c *target.Config, res *ChangeResult) (string, error) {
			n := nc
			if n.ANAGroup == 0 {
				// Spread over a gateway group's ANA groups.
				n.ANAGroup = d.SpreadANAGroup(c)
			}
			path, nsid, err := c.AddNamespace(r.PathValue("nqn"), n)
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
		m, err := ReadBody(r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "modify namespace", func(c *target.Config, _ *ChangeResult) (string, error) {
			n, prefix, err := c.Namespace(r.PathValue("nqn"), nsid)
			if err != nil {
				return "", err
			}
			return prefix, Patch(m, n, prefix, "nsid")
		})
	})
	handle("DELETE /v1/subsystems/{nqn}/namespaces/{nsid}", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		return d.Change(r, "remove namespace", func(c *target.Config, _ *ChangeResult) (string, error) {
			return "", c.RemoveNamespace(r.PathValue("nqn"), nsid)
		})
	})
	handle("POST /v1/subsystems/{nqn}/namespaces/{nsid}/resize", func(r *http.Request) (any, error) {
		nsid, err := target.ParseNSID(r.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		body, err := DecodeNew[struct {
			Size string `mapstructure:"size"`
		}](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "resize namespace", func(c *target.Config, _ *ChangeResult) (string, error) {
			path, err := c.ResizeNamespace(r.PathValue("nqn"), nsid, body.Size)
			if err != nil {
				return path, err
			}
			return path + ".backend", nil // "size" names the parameter
		})
	})
	handle("PUT /v1/subsystems/{nqn}/hosts/{host}", func(r *http.Request) (any, error) {
		return d.Change(r, "allow host", func(c *target.Config, _ *ChangeResult) (string, error) {
			return c.AllowHost(r.PathValue("nqn"), r.PathValue("host"))
		})
	})
	handle("DELETE /v1/subsystems/{nqn}/hosts/{host}", func(r *http.Request) (any, error) {
		return d.Change(r, "disallow host", func(c *target.Config, _ *ChangeResult) (string, error) {
			return "", c.DisallowHost(r.PathValue("nqn"), r.PathValue("host"))
		})
	})

	// Known hosts.
	handle("GET /v1/hosts", func(r *http.Request) (any, error) { return target.EncodeJSON(cfg().Hosts), nil })
	handle("POST /v1/hosts", func(r *http.Request) (any, error) {
		hc, err := DecodeNew[target.HostConfig](r)
		if err != nil {
			return nil, err
		}
		return d.Change(r, "add host", func(c *target.Config, _ *ChangeResult) (string, error) { return c.AddHost(hc) })
	})
	handle("GET /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		c := cfg()
		i := c.HostIndex(r.PathValue("nqn"))
		if i < 0 {
			return nil, &Error{Status: http.StatusNotFound, Message: "no host " + r.PathValue("nqn")}
		}
		return target.EncodeJSON(c.Hosts[i]), nil
	})
	handle("PATCH /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		m, err := ReadBody(r)
		if err != nil {
			return nil, err
		}
		nqn := r.PathValue("nqn")
		return d.Change(r, "modify host", func(c *target.Config, _ *ChangeResult) (string, error) {
			i := c.HostIndex(nqn)
			if i < 0 {
				return "", &Error{Status: http.StatusNotFound, Message: "no host " + nqn}
			}
			prefix := fmt.Sprintf("hosts[%d]", i)
			return prefix, Patch(m, &c.Hosts[i], prefix, "nqn")
		})
	})
	handle("DELETE /v1/hosts/{nqn}", func(r *http.Request) (any, error) {
		return d.Change(r, "remove host", func(c *target.Config, _ *ChangeResult) (string, error) {
			return "", c.RemoveHost(r.PathValue("nqn"))
		})
	})

	// The log level (daemon.log_level).
	handle("GET /v1/log_level", func(r *http.Request) (any, error) {
		return map[string]string{"level": d.LogLevel()}, nil
	})
	handle("PUT /v1/log_level", func(r *http.Request) (any, error) {
		body, err := DecodeNew[struct {
			Level string `mapstructure:"level"`
		}](r)
		if err != nil {
			return nil, err
		}
		l, err := zapcore.ParseLevel(body.Level)
		if err != nil || body.Level == "" || !slices.Contains([]string{"debug", "info", "warn", "error"}, body.Level) {
			return nil, &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("level: %q is not one of debug, info, warn, error", body.Level),
				Problems: []Problem{{Field: "level", ConfigField: "daemon.log_level", Reason: "not one of debug, info, warn, error"}}}
		}
		return d.SetLogLevel(r, body.Level, l)
	})

	// Controllers and queues with their statistics.
	handle("GET /v1/controllers", func(r *http.Request) (any, error) {
		list := d.Controllers()
		if list == nil {
			list = []target.ControllerStatus{}
		}
		return list, nil
	})
	handle("GET /v1/queues", func(r *http.Request) (any, error) {
		list := d.Queues()
		if list == nil {
			list = []target.QueueStatus{}
		}
		return list, nil
	})
}
