package main

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
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/target"
)

// The control socket's trace operation (the one op this file adds to it):
//
//	GET  /v1/trace                        the running (or last) trace's status
//	POST /v1/trace {"action":"start", "file":"/abs.pcap", "spec":{...}}
//	POST /v1/trace {"action":"stop"}
const tracePath = "/v1/trace"

// traceRequest is the body of POST /v1/trace.
type traceRequest struct {
	Action string           `json:"action"` // start or stop
	File   string           `json:"file,omitempty"`
	Spec   target.TraceSpec `json:"spec"`
}

// tracer is what the daemon needs of a target for traces (*target.Target).
type tracer interface {
	StartTrace(spec target.TraceSpec, w io.WriteCloser) error
	StopTrace() (target.TraceStatus, error)
	TraceStatus() (target.TraceStatus, bool)
}

// traceRoutes adds the trace operation to the control socket's mux.
func (d *daemon) traceRoutes(mux *http.ServeMux) {
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
	get := func() (tracer, error) {
		if d.t == nil {
			return nil, errors.New("the target is not created yet")
		}
		tr, ok := d.t.(tracer)
		if !ok {
			return nil, errors.New("this target cannot trace")
		}
		return tr, nil
	}
	mux.HandleFunc("GET "+tracePath, func(w http.ResponseWriter, r *http.Request) {
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
	mux.HandleFunc("POST "+tracePath, func(w http.ResponseWriter, r *http.Request) {
		tr, err := get()
		if err != nil {
			fail(w, http.StatusServiceUnavailable, err)
			return
		}
		var req traceRequest
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
			// The daemon runs as root: never write through a link or
			// into a file another user made (createPrivate).
			f, err := createPrivate(req.File)
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

// runTrace is `nvmetd trace start|stop|status`.
func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("nvmetd trace", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	host := fs.String("host", "", "trace the queues of this host NQN (connected now and connecting later)")
	addr := fs.String("address", "", "trace the queues from this host IP address (now and new)")
	ctrl := fs.String("controller", "", "trace a controller's queues: SUBNQN:CNTLID[:QID] (QID 0 is the admin queue; all queues without it)")
	file := fs.StringP("write", "w", "", "pcap file to write (start; created mode 0600 by the daemon)")
	maxSize := fs.String("max-size", "64MiB", "stop when the file reaches this size")
	duration := fs.Duration("duration", time.Minute, "stop after this long")
	output := fs.StringP("output", "o", "normal", "output format: normal or json")
	socket := fs.String("socket", "", "control socket (default as nvmetd status)")
	config := fs.String("config", "", "configuration file to take daemon.control_socket from")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the daemon")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: nvmetd trace start (--host NQN | --address IP | --controller SUBNQN:CNTLID[:QID]) -w FILE [--max-size SIZE] [--duration D]
       nvmetd trace stop
       nvmetd trace status

A wire trace of the selected queues as a pcap file that Wireshark and tshark
dissect as iWARP MPA/DDP/RDMAP; with the NVMe-oF dissector (the package
installs it as /usr/share/nvmetd/wireshark/nvmeof-iwarp.lua; in the source,
deploy/wireshark/nvmeof-iwarp.lua) also the NVMe-oF capsules:
  tshark -X lua_script:nvmeof-iwarp.lua -o tcp.try_heuristic_first:TRUE -r FILE
A trace by --host has the queues that connect while it runs from their
first FPDU on, the Connect capsule included.
It stops at --max-size or after --duration, whichever comes first.

flags:
%s`, fs.FlagUsages())
	}
	if len(args) == 0 {
		fs.Usage()
		return exitUsage
	}
	action := args[0]
	if action == "-h" || action == "--help" || action == "help" {
		fs.Usage() // as nvmetd --help and nvmetd status --help: on stderr, exit 0
		return exitOK
	}
	if err := fs.Parse(args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return exitOK
		}
		fmt.Fprintf(stderr, "nvmetd trace: %v (see nvmetd trace --help)\n", err)
		return exitUsage
	}
	if *output != "normal" && *output != "json" {
		fmt.Fprintf(stderr, "nvmetd trace: --output %q is not normal or json\n", *output)
		return exitUsage
	}
	var req *traceRequest
	switch action {
	case "start":
		spec := target.TraceSpec{Host: *host, Address: *addr, Duration: *duration, QID: -1}
		if *ctrl != "" {
			// SUBNQN:CNTLID[:QID]; the NQN itself has colons.
			parts := strings.Split(*ctrl, ":")
			n := len(parts)
			qidGiven := false
			if n >= 3 {
				if _, err := strconv.ParseUint(parts[n-2], 10, 16); err == nil {
					qidGiven = true
				}
			}
			if qidGiven {
				q, err := strconv.ParseUint(parts[n-1], 10, 16)
				if err != nil {
					fmt.Fprintf(stderr, "nvmetd trace: --controller %q: bad QID\n", *ctrl)
					return exitUsage
				}
				spec.QID = int(q)
				parts = parts[:n-1]
				n--
			}
			c, err := strconv.ParseUint(parts[n-1], 10, 16)
			if err != nil || n < 2 {
				fmt.Fprintf(stderr, "nvmetd trace: --controller %q is not SUBNQN:CNTLID[:QID]\n", *ctrl)
				return exitUsage
			}
			spec.Subsystem, spec.CNTLID = strings.Join(parts[:n-1], ":"), uint16(c)
		}
		size, err := parseByteSize(*maxSize)
		if err != nil {
			fmt.Fprintf(stderr, "nvmetd trace: --max-size %q: %v\n", *maxSize, err)
			return exitUsage
		}
		spec.MaxBytes = size
		if *file == "" {
			fmt.Fprintln(stderr, "nvmetd trace: start needs -w FILE")
			return exitUsage
		}
		abs, err := filepath.Abs(*file)
		if err != nil {
			fmt.Fprintf(stderr, "nvmetd trace: %v\n", err)
			return exitUsage
		}
		req = &traceRequest{Action: "start", File: abs, Spec: spec}
	case "stop":
		req = &traceRequest{Action: "stop"}
	case "status":
	default:
		fmt.Fprintf(stderr, "nvmetd trace: %q is not start, stop or status\n", action)
		return exitUsage
	}
	path, err := statusSocket(*socket, *config, fs.Changed("config"))
	if err != nil {
		fmt.Fprintf(stderr, "nvmetd trace: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := traceCall(ctx, path, req)
	if err != nil {
		fmt.Fprintf(stderr, "nvmetd trace: %v\n", err)
		return exitFailure
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return exitOK
	}
	state := "running"
	if st.Stopped {
		state = "stopped (" + st.Reason + ")"
	}
	fmt.Fprintf(stdout, "trace %s: %d queues, %d packets, %d bytes, since %s\n", state, st.Queues, st.Packets, st.Bytes, st.Started.Format(time.RFC3339))
	return exitOK
}

// traceCall sends a trace request (nil: status) to the daemon.
func traceCall(ctx context.Context, socket string, req *traceRequest) (*target.TraceStatus, error) {
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
	hr, err := http.NewRequestWithContext(ctx, method, "http://nvmetd"+tracePath, body)
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

// parseByteSize parses "64MiB", "1GiB", "4096".
func parseByteSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("not a size (e.g. 64MiB)")
	}
	return n * mult, nil
}
