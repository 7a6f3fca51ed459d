// Package metricserve serves a Prometheus registry over HTTP for the
// daemons (nvmetd, the host daemon of nvmeof connect): on a TCP address or a
// unix socket, optionally with TLS and HTTP basic authentication, with the
// Go runtime and process collectors (goroutines, file descriptors, memory)
// beside the caller's.
package metricserve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config says where and how to serve.
type Config struct {
	// Address is a TCP address ("127.0.0.1:9469"); Socket a unix socket
	// path. Exactly one is set.
	Address, Socket string
	// Path is the HTTP path ("/metrics" when empty).
	Path string
	// TLSCert and TLSKey: HTTPS when both are set.
	TLSCert, TLSKey string
	// User and Password: HTTP basic authentication when User is set.
	User, Password string
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	sock string
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, a <namespace>_build_info gauge, and cs.
func NewRegistry(namespace, version string, cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info", Help: "The running binary's version (1).",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Start listens and serves g until Close.
func Start(cfg Config, g prometheus.Gatherer, log *zap.Logger) (*Server, error) {
	path := cfg.Path
	if path == "" {
		path = "/metrics"
	}
	var ln net.Listener
	var err error
	switch {
	case cfg.Address != "" && cfg.Socket != "":
		return nil, errors.New("metrics: both an address and a socket")
	case cfg.Address != "":
		ln, err = net.Listen("tcp", cfg.Address)
	case cfg.Socket != "":
		ln, err = listenUnix(cfg.Socket)
	default:
		return nil, errors.New("metrics: no address or socket")
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:          zap.NewStdLog(log),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           30 * time.Second,
	})
	if cfg.User != "" {
		h = basicAuth(h, cfg.User, cfg.Password)
		if cfg.Address != "" && cfg.TLSCert == "" {
			// RFC 7617 §4: the credentials are only encoded; without TLS
			// anyone on the path reads the password.
			log.Warn("metrics: basic authentication over plain HTTP sends the password in clear text to anyone on the path: set tls_cert and tls_key, or serve on a unix socket",
				zap.String("address", cfg.Address))
		}
	}
	mux := http.NewServeMux()
	mux.Handle(path, h)
	s := &Server{
		srv: &http.Server{
			Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: zap.NewStdLog(log),
		},
		ln: ln, done: make(chan struct{}), sock: cfg.Socket,
	}
	go func() {
		defer close(s.done)
		var err error
		if cfg.TLSCert != "" {
			err = s.srv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			err = s.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Addr is the address served on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving (and removes the unix socket).
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	if s.sock != "" {
		_ = os.Remove(s.sock)
	}
}

// listenUnix listens on a unix socket (mode 0660), replacing a stale one.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s answers: another process serves it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// basicAuth requires user and password (compared in constant time).
func basicAuth(h http.Handler, user, password string) http.Handler {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotU[:], wantU[:])&subtle.ConstantTimeCompare(gotP[:], wantP[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="metrics"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ReadPasswordFile reads a basic authentication password: the first line
// of path. The file must be a regular file owned by root or this process's
// user that neither its group nor others may access (as key files): a
// password another user can read, or chose, protects nothing.
func ReadPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	case !ok:
		return "", fmt.Errorf("%s: no owner information", path)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("%s is owned by uid %d, neither root nor this process's user (uid %d)", path, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s is accessible by group or others (mode %04o): keep it mode 0600 or 0400 (chmod go-rwx)", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("%s: the first line (the password) is empty", path)
	}
	return line, nil
}
