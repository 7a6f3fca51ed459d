package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// TestFailedReloadIsLoud: an admin rotates a key with an edit the daemon
// refuses. Before, `systemctl reload` (kill -HUP) succeeded, `nvmetd
// status` said "health: ok" and exited 0, and no metric showed it. Now
// `nvmetd reload` (the unit's ExecReload) exits 1 with the reason, status is
// degraded (exit 3) naming the refused reload until a reload succeeds, and
// nvmetd_config_last_reload_successful is 0; the same after a SIGHUP.
func TestFailedReloadIsLoud(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	dir := isolate(t)
	notifySock, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notifySock)
	port := testnode.FreePort(t)
	sock := filepath.Join(dir, "ctl.sock")
	msock := filepath.Join(dir, "metrics.sock")
	const nqn = "nqn.2014-08.org.example:reload"
	config := func(extra string) string {
		return fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 10s}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 4MiB}}
metrics: {socket: %s}
%s`, sock, port, nqn, nqn, msock, extra)
	}
	cfgFile := writeFile(t, dir, "nvmetd.yaml", config(""))
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--config", cfgFile, "--log-format", "json"}, io.Discard, &stderr) }()
	wait := func(prefix string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, prefix) {
					return
				}
			case c := <-code:
				t.Fatalf("nvmetd exited %d:\n%s", c, stderr.String())
			case <-timeout:
				t.Fatalf("no %q:\n%s", prefix, stderr.String())
			}
		}
	}
	wait("READY=1")
	defer func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case <-code:
		case <-time.After(time.Minute):
			t.Errorf("no exit after SIGTERM")
		}
	}()
	metrics := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", msock)
	}}}
	gauge := func(name string) float64 {
		t.Helper()
		resp, err := metrics.Get("http://nvmetd/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no %s in the scrape", name)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	cli := func(args ...string) (int, string) {
		var out bytes.Buffer
		c := run(append(args, "--socket", sock), &out, &out)
		return c, out.String()
	}
	if v := gauge("nvmetd_config_last_reload_successful"); v != 1 {
		t.Errorf("after start: nvmetd_config_last_reload_successful %v", v)
	}
	started := gauge("nvmetd_config_last_reload_success_timestamp_seconds")
	if started < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("success timestamp %v", started)
	}

	// A key rotation the daemon refuses (an invalid host NQN beside it).
	writeFile(t, dir, "nvmetd.yaml", config("hosts: [{nqn: not-an-nqn, dhchap_key: \"file:/etc/nvmetd/h.key\"}]\n"))
	if c, out := cli("reload"); c != exitFailure || !strings.Contains(out, "hosts[0].nqn") {
		t.Errorf("nvmetd reload of a refused configuration: exit %d, want %d with the reason:\n%s", c, exitFailure, out)
	}
	wait("RELOADING=1") // the notifications of that reload, so that later waits see later ones
	wait("READY=1")
	if c, out := cli("status"); c != exitDegraded || !strings.Contains(out, "DEGRADED") || !strings.Contains(out, "the last reload") {
		t.Errorf("status after a refused reload: exit %d, want %d:\n%s", c, exitDegraded, out)
	}
	if v := gauge("nvmetd_config_last_reload_successful"); v != 0 {
		t.Errorf("after a refused reload: nvmetd_config_last_reload_successful %v", v)
	}

	// Fixed: reload succeeds, health is back, the timestamp moves.
	writeFile(t, dir, "nvmetd.yaml", config(""))
	if c, out := cli("reload"); c != exitOK {
		t.Errorf("nvmetd reload of a good configuration: exit %d:\n%s", c, out)
	}
	wait("RELOADING=1")
	wait("READY=1")
	if c, out := cli("status"); c != exitOK {
		t.Errorf("status after a good reload: exit %d:\n%s", c, out)
	}
	if v := gauge("nvmetd_config_last_reload_successful"); v != 1 {
		t.Errorf("after a good reload: nvmetd_config_last_reload_successful %v", v)
	}
	if v := gauge("nvmetd_config_last_reload_success_timestamp_seconds"); v <= started {
		t.Errorf("success timestamp did not move: %v <= %v", v, started)
	}

	// SIGHUP (what kill -HUP does) of a refused configuration: degraded too.
	writeFile(t, dir, "nvmetd.yaml", config("hosts: [{nqn: not-an-nqn}]\n"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("RELOADING=1")
	wait("READY=1")
	if c, out := cli("status"); c != exitDegraded || !strings.Contains(out, "the last reload") {
		t.Errorf("status after a refused SIGHUP: exit %d:\n%s", c, out)
	}
	if v := gauge("nvmetd_config_last_reload_successful"); v != 0 {
		t.Errorf("after a refused SIGHUP: nvmetd_config_last_reload_successful %v", v)
	}
}
