// Package traceapi is nvmetd's trace service on its control socket: start
// a wire trace (a pcap file of the queues of a host, an address or a
// controller, bounded in size and time), stop it, read its status; and
// the client of that service (nvmetd trace). The traces themselves are the
// target's (target.TraceSpec, target.StartTrace).
package traceapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"

	"github.com/nvmetd/nvmetd/target"
)

// The control socket's trace operation (the one op this file adds to it):
//
//	GET  /v1/trace                        the running (or last) trace's status
//	POST /v1/trace {"action":"start", "file":"/abs.pcap", "spec":{...}}
//	POST /v1/trace {"action":"stop"}
const Path = "/v1/trace"

// Request is the body of POST /v1/trace.
type Request struct {
	Action string           `json:"action"` // start or stop
	File   string           `json:"file,omitempty"`
	Spec   target.TraceSpec `json:"spec"`
}

// Tracer is what the service needs of a target (*target.Target).
type Tracer interface {
	StartTrace(spec target.TraceSpec, w io.WriteCloser) error
	StopTrace() (target.TraceStatus, error)
	TraceStatus() (target.TraceStatus, bool)
}

// Routes adds the trace operation to a control socket's mux. get returns
// the target to trace (an error while there is none); create opens the
// pcap file a start names (the daemon runs as root: it must never write
// through a link or into a file another user made).
func Routes(mux *http.ServeMux, get func() (Tracer, error), create func(path string) (io.WriteCloser, error)) {
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
	fail := func(w http.ResponseWriter, code int, err error) {
		reply(w, code, map[string]string{"error": err.Error()})
	}
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		tr, err := get()
		if err != nil {
			fail(w, http.StatusServiceUnavailable, err)
			return
		}
		st, ok := tr.TraceStatus()
		if !ok {
			fail(w, http.StatusNotFound, target.ErrNoTrace)
			return
		}
		reply(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		tr, err := get()
		if err != nil {
			fail(w, http.StatusServiceUnavailable, err)
			return
		}
		var req Request
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("bad request: %w", err))
			return
		}
		switch req.Action {
		case "start":
			if !filepath.IsAbs(req.File) {
				fail(w, http.StatusBadRequest, fmt.Errorf("file %q is not an absolute path", req.File))
				return
			}
			f, err := create(req.File)
			if err != nil {
				fail(w, http.StatusBadRequest, err)
				return
			}
			if err := tr.StartTrace(req.Spec, f); err != nil {
				code := http.StatusBadRequest
				if errors.Is(err, target.ErrTraceRunning) {
					code = http.StatusConflict
				}
				fail(w, code, err)
				return
			}
			st, _ := tr.TraceStatus()
			reply(w, http.StatusOK, st)
		case "stop":
			st, err := tr.StopTrace()
			if err != nil {
				code := http.StatusInternalServerError
				if errors.Is(err, target.ErrNoTrace) {
					code = http.StatusNotFound
				}
				fail(w, code, err)
				return
			}
			reply(w, http.StatusOK, st)
		default:
			fail(w, http.StatusBadRequest, fmt.Errorf("action %q is not start or stop", req.Action))
		}
	})
}

// Call sends a trace request (nil: status) to the daemon listening on
// the unix socket socket.
func Call(ctx context.Context, socket string, req *Request) (*target.TraceStatus, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer client.CloseIdleConnections()
	method, body := http.MethodGet, io.Reader(nil)
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		method, body = http.MethodPost, bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, method, "http://nvmetd"+Path, body)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("control socket %s: %s", socket, resp.Status)
	}
	var st target.TraceStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("control socket %s: bad answer: %w", socket, err)
	}
	return &st, nil
}
