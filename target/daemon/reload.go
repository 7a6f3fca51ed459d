package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// The control socket's reload operation:
//
//	POST /v1/reload   re-read the configuration file and apply it, as
//	                  SIGHUP does, and answer with the outcome
//	                  (reloadInfo): 200 applied, 409 refused or not all
//	                  applied (the error says why).
//
// `nvmetd reload` is systemd's ExecReload: Debian 12's systemd (252)
// lacks Type=notify-reload (253+), and `kill -HUP` reports success before
// the daemon has even read the file. `nvmetd reload` waits for the
// verdict and exits 1 when the reload was refused, so `systemctl reload
// nvmetd` fails loudly.
const reloadPath = "/v1/reload"

// reloadRoutes adds the reload operation to the control socket's mux.
func (d *daemon) reloadRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+reloadPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		d.mu.Lock()
		state := d.state
		d.mu.Unlock()
		if state != stateRunning && state != stateReloading {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = enc.Encode(map[string]string{"error": "the daemon is " + state + ": not reloading now"})
			return
		}
		info := d.reload()
		code := http.StatusOK
		if info.Error != "" {
			code = http.StatusConflict
		}
		w.WriteHeader(code)
		_ = enc.Encode(info)
	})
}

// runReload is `nvmetd reload`: reload the running daemon's configuration
// and report the outcome; exit 1 if it was refused or not all applied.
func runReload(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("nvmetd reload", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	socket := fs.String("socket", "", "control socket (default as nvmetd status)")
	config := fs.String("config", "", "configuration file to take daemon.control_socket from")
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the verdict")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: nvmetd reload [flags]

Re-read the configuration file and apply it, as SIGHUP does, and wait for
the verdict (systemd's ExecReload): exit status 0 applied, 1 refused (the
running configuration is kept) or not all applied, or no answer, 2 usage.

flags:
%s`, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return exitOK
		}
		fmt.Fprintf(stderr, "nvmetd reload: %v (see nvmetd reload --help)\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nvmetd reload: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	path, err := statusSocket(*socket, *config, fs.Changed("config"))
	if err != nil {
		fmt.Fprintln(stderr, "nvmetd reload:", err)
		return exitFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	info, err := reloadCall(ctx, path)
	if err != nil {
		fmt.Fprintln(stderr, "nvmetd reload:", err)
		return exitFailure
	}
	if info.Error != "" {
		fmt.Fprintf(stderr, "nvmetd reload: refused or not all applied:\n  %s\n", indent(info.Error))
		return exitFailure
	}
	if len(info.Changes) == 0 {
		fmt.Fprintln(stdout, "configuration reloaded: no changes")
	}
	for _, c := range info.Changes {
		fmt.Fprintln(stdout, "reloaded: "+c)
	}
	return exitOK
}

// reloadCall asks the daemon at socket to reload.
func reloadCall(ctx context.Context, socket string) (*reloadInfo, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://nvmetd"+reloadPath, bytes.NewReader(nil))
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var info reloadInfo
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict {
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, fmt.Errorf("control socket %s: bad answer: %w", socket, err)
		}
		return &info, nil
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return nil, errors.New(e.Error)
	}
	return nil, fmt.Errorf("control socket %s: %s", socket, resp.Status)
}

// reloadCollector exports the outcome of the last reload, as Prometheus
// does for its own configuration: nvmetd_config_last_reload_successful (1
// while the last reload, or the start, applied the file) and
// nvmetd_config_last_reload_success_timestamp_seconds.
type reloadCollector struct{ d *daemon }

var (
	reloadOKDesc = prometheus.NewDesc("nvmetd_config_last_reload_successful",
		"1 if the last configuration reload (SIGHUP, systemctl reload, nvmetd reload) applied, 0 if it was refused or not all applied.", nil, nil)
	reloadAtDesc = prometheus.NewDesc("nvmetd_config_last_reload_success_timestamp_seconds",
		"When the configuration was last applied successfully (the start, or a reload), in seconds since the epoch.", nil, nil)
)

func (c reloadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadOKDesc
	ch <- reloadAtDesc
}

func (c reloadCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.Lock()
	ok := c.d.lastReload == nil || c.d.lastReload.Error == ""
	at := c.d.appliedAt
	c.d.mu.Unlock()
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(reloadOKDesc, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(reloadAtDesc, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
}
