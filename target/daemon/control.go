package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
)

// The control socket speaks HTTP/1.1 over a unix socket (mode 0600, so
// only the daemon's user, normally root, may ask). Endpoints:
//
//	GET /v1/status                   daemonStatus as JSON
//	GET /v1/status?health_report=1   the same with health reports of block namespaces
//	GET, POST /v1/trace              wire traces (target/traceapi)
const statusPath = "/v1/status"

// daemonStatus is the daemon's answer to `nvmetd status`.
type daemonStatus struct {
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// ConfigFile is the configuration file; "" for the built-in default.
	ConfigFile string `json:"config_file,omitempty"`
	// State is starting, running, reloading or stopping.
	State string `json:"state"`
	// Health is "ok", or "degraded" when part of the configuration is not
	// served: Problems says what (a namespace that failed to open, with
	// its configuration field; a port not listening; an unhealthy target).
	// `nvmetd status` exits 3 when degraded.
	Health   string   `json:"health"`
	Problems []string `json:"problems,omitempty"`
	// HealthError is what target Healthy returned, if not nil.
	HealthError string      `json:"health_error,omitempty"`
	LastReload  *reloadInfo `json:"last_reload,omitempty"`
	// LastChange is the management API's last change (nvmetctl).
	LastChange *reloadInfo `json:"last_change,omitempty"`
	// Unsaved is true while the running configuration has management API
	// changes that the configuration file lacks (a SIGHUP would undo
	// them; nvmetctl save writes them).
	Unsaved bool `json:"unsaved_changes,omitempty"`
	// Pending counts the reloads and changes waiting for the one in
	// progress.
	Pending int `json:"pending_changes,omitempty"`
	// Warnings are the configuration's warnings.
	Warnings []string      `json:"warnings,omitempty"`
	Target   target.Status `json:"target"`
	// Gateway is the gateway group membership (nil for a stand-alone
	// nvmetd).
	Gateway       *gwtarget.Status `json:"gateway,omitempty"`
	HealthReports []healthReport   `json:"health_reports,omitempty"`
}

// reloadInfo is the outcome of the last SIGHUP.
type reloadInfo struct {
	At      time.Time `json:"at"`
	Error   string    `json:"error,omitempty"`
	Changes []string  `json:"changes,omitempty"`
}

// healthReport is a block namespace's device health report.
type healthReport struct {
	Subsystem string `json:"subsystem"`
	NSID      uint32 `json:"nsid"`
	Path      string `json:"path"`
	Report    string `json:"report,omitempty"`
	Error     string `json:"error,omitempty"`
}

// listenControl listens on the control socket at path, creating its
// directory. A socket left behind by a daemon that died is removed; a
// socket that answers means another nvmetd is running, which is an error.
func listenControl(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// A directory another user made (a non-root daemon's default is under
	// /tmp) or may write to lets that user replace the socket with one of
	// their own and receive what nvmetctl and nvmetd status send.
	if err := privateDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("control socket: %s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket: %s answers: another nvmetd is running", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("control socket: %s exists and cannot be probed: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket: removing stale %s: %w", path, err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return l, nil
}

// controlServer serves the control socket.
type controlServer struct {
	srv  *http.Server
	done chan struct{}
}

// serveControl serves status requests on l until close; snapshot builds
// the answer. Each of routes registers more endpoints (the management API).
func serveControl(l net.Listener, snapshot func(reports bool) daemonStatus, log *zap.Logger, routes ...func(*http.ServeMux)) *controlServer {
	mux := http.NewServeMux()
	for _, r := range routes {
		r(mux)
	}
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, r *http.Request) {
		st := snapshot(r.URL.Query().Get("health_report") != "")
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			log.Debug("control: writing status", zap.Error(err))
		}
	})
	cs := &controlServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("control")),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(cs.done)
		if err := cs.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket stopped", zap.Error(err))
		}
	}()
	return cs
}

// close stops the server and removes the socket.
func (cs *controlServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cs.srv.Shutdown(ctx); err != nil {
		cs.srv.Close()
	}
	<-cs.done
}

// fetchStatus asks the daemon at socket for its status.
func fetchStatus(ctx context.Context, socket string, reports bool) (*daemonStatus, error) {
	c := ctlclient.New(socket)
	defer c.Close()
	var q url.Values
	if reports {
		q = url.Values{"health_report": {"1"}}
	}
	var st daemonStatus
	if err := c.Do(ctx, http.MethodGet, statusPath, q, nil, &st); err != nil {
		var ae *ctlclient.Error
		if errors.As(err, &ae) {
			return nil, fmt.Errorf("control socket %s: %s", socket, ae.Message)
		}
		return nil, err
	}
	return &st, nil
}
