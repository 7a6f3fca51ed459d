package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/traceapi"
)

// traceRoutes adds the trace service (target/traceapi) to the control
// socket's mux, on the daemon's target.
func (d *daemon) traceRoutes(mux *http.ServeMux) {
	traceapi.Routes(mux, func() (traceapi.Tracer, error) {
		if d.t == nil {
			return nil, errors.New("the target is not created yet")
		}
		tr, ok := d.t.(traceapi.Tracer)
		if !ok {
			return nil, errors.New("this target cannot trace")
		}
		return tr, nil
	}, func(path string) (io.WriteCloser, error) {
		f, err := createPrivate(path) // never through a link, nor into another user's file
		if err != nil {
			return nil, err
		}
		return f, nil
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
	var req *traceapi.Request
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
		req = &traceapi.Request{Action: "start", File: abs, Spec: spec}
	case "stop":
		req = &traceapi.Request{Action: "stop"}
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
	st, err := traceapi.Call(ctx, path, req)
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
