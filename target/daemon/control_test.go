package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/target"
)

// sampleStatus is a status with every part filled in.
func sampleStatus(reports bool) daemonStatus {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	st := daemonStatus{
		Version: "v1.2.3", PID: 4242, StartedAt: at, ConfigFile: "/etc/nvmetd/nvmetd.yaml", State: stateRunning,
		LastReload: &reloadInfo{At: at.Add(time.Hour), Changes: []string{"port 2 added (0.0.0.0:4421)"}},
		Warnings:   []string{"subsystems[1] (nqn.2014-08.org.example:b) is served on no port"},
		Target: target.Status{
			StartedAt: at,
			Ports: []target.PortStatus{
				{ID: 1, Address: "127.0.0.1:4420", Family: "ipv4", Listening: true, Subsystems: []string{"nqn.2014-08.org.example:a"}, Connections: 3},
				{ID: 2, Address: "[::]:4421", Family: "ipv6", Error: "bind: address already in use"},
			},
			Subsystems: []target.SubsystemStatus{{
				NQN: "nqn.2014-08.org.example:a", Serial: "0123456789abcdef", Model: "nvmetd", FirmwareRevision: "1.2.3",
				AllowAnyHost: true, Controllers: 1,
				Namespaces: []target.NamespaceStatus{
					{NSID: 1, Enabled: true, State: target.NamespaceOnline,
						Backend: target.BackendStatus{Kind: "file", Path: "/var/lib/nvmetd/a.img", Size: 1 << 30,
							Health: target.NewHealthStatus(backend.Health{Reason: "file: no device health"}, nil, at)}},
					{NSID: 2, Enabled: true, State: target.NamespaceOnline,
						Backend: target.BackendStatus{Kind: "block", Path: "/dev/nvme1n1", Size: 1 << 40,
							Health: target.NewHealthStatus(backend.Health{Available: true, Valid: backend.HealthAll,
								CriticalWarning: backend.CriticalWarningSpare, TemperatureKelvin: 313}, nil, at)}},
					{NSID: 3, Enabled: true, State: target.NamespaceFailed, Error: "open /dev/sdz: no such file or directory",
						Backend: target.BackendStatus{Kind: "block", Path: "/dev/sdz"}},
				},
			}},
			Controllers: []target.ControllerStatus{{
				CNTLID: 1, Subsystem: "nqn.2014-08.org.example:a", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
				RemoteAddress: "127.0.0.1:50000", LocalAddress: "127.0.0.1:4420", IOQueues: 2, KATOMillis: 5000,
				ConnectedAt: at, IO: target.IOCounters{ReadCommands: 10, ReadBytes: 40960, WriteCommands: 0},
			}},
		},
	}
	if reports {
		st.HealthReports = []healthReport{{Subsystem: "nqn.2014-08.org.example:a", NSID: 2, Path: "/dev/nvme1n1", Report: "SMART overall: PASSED\n"}}
	}
	return st
}

// TestControlRoundTrip serves a status on a real unix socket and reads it
// with `nvmetd status`, as JSON and as text.
func TestControlRoundTrip(t *testing.T) {
	isolate(t)
	sock := filepath.Join(t.TempDir(), "ctl", "nvmetd.sock")
	l, err := listenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", fi, err)
	}
	var asked []bool
	cs := serveControl(l, func(reports bool) daemonStatus {
		asked = append(asked, reports)
		return sampleStatus(reports)
	}, zap.NewNop())

	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--socket", sock, "-o", "json", "--health-report"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got daemonStatus
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := sampleStatus(true)
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("JSON round trip:\n got %s\nwant %s", gotJSON, wantJSON)
	}

	stdout.Reset()
	t.Setenv("NVMETD_CONTROL_SOCKET", sock) // found without --socket
	if code := run([]string{"status"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	text := stdout.String()
	for _, w := range []string{
		"nvmetd v1.2.3, pid 4242, running since",
		"configuration: /etc/nvmetd/nvmetd.yaml",
		"last reload: ", "ok (1 changes)",
		"1   127.0.0.1:4420  listening",
		"down: bind: address already in use",
		"serial 0123456789abcdef, model nvmetd, firmware 1.2.3, any host, 1 controllers",
		"/var/lib/nvmetd/a.img",
		"n/a: file: no device health",
		"critical: spare below threshold",
		"failed: open /dev/sdz: no such file or directory",
		"nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
		"10 (40.0KiB)",
		"5s",
		"- subsystems[1] (nqn.2014-08.org.example:b) is served on no port",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("text status lacks %q:\n%s", w, text)
		}
	}
	if len(asked) != 2 || !asked[0] || asked[1] {
		t.Errorf("health report requests: %v", asked)
	}

	cs.close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	stderr.Reset()
	if code := run([]string{"status", "--socket", sock}, &stdout, &stderr); code != exitFailure ||
		!strings.Contains(stderr.String(), "nvmetd is not running (no control socket at "+sock+")") {
		t.Errorf("not running: exit %d, %s", code, stderr.String())
	}
}

// TestListenControl covers a socket left by a dead daemon, a live one, and
// a non-socket in the way.
func TestListenControl(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "n.sock")

	// A stale socket: bound, then its listener gone without unlinking.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	l, err := listenControl(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}

	// A live one.
	if _, err := listenControl(sock); err == nil || !strings.Contains(err.Error(), "another nvmetd is running") {
		t.Errorf("live socket: %v", err)
	}
	l.Close()

	file := writeFile(t, dir, "plain", "x")
	if _, err := listenControl(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("plain file: %v", err)
	}
}

// TestStatusSocketFromConfig: `nvmetd status` finds a socket configured in
// the configuration file, even when the rest of the file is invalid.
func TestStatusSocketFromConfig(t *testing.T) {
	dir := isolate(t)
	f := writeFile(t, dir, "n.yaml", "daemon:\n  control_socket: /srv/n.sock\nports: [{address: nowhere}]\n")
	if got, err := statusSocket("", f, true); err != nil || got != "/srv/n.sock" {
		t.Errorf("%q %v", got, err)
	}
	if got, err := statusSocket("/flag.sock", f, true); err != nil || got != "/flag.sock" {
		t.Errorf("flag: %q %v", got, err)
	}
	if got, err := statusSocket("", "", false); err != nil || got != defaultControlSocket() {
		t.Errorf("default: %q %v", got, err)
	}
	if _, err := statusSocket("", filepath.Join(dir, "missing.yaml"), true); err == nil {
		t.Error("missing explicit config accepted")
	}
}

func TestFetchStatusErrors(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "x.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// Something that is not nvmetd answers garbage.
	go func() {
		c, err := l.Accept()
		if err == nil {
			// Read the request before answering, as a server would.
			buf := make([]byte, 4096)
			var req []byte
			for !bytes.Contains(req, []byte("\r\n\r\n")) {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				req = append(req, buf[:n]...)
			}
			c.Write([]byte("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := fetchStatus(ctx, sock, false); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("500: %v", err)
	}
	l.Close()
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 1 << 30: "1.0GiB", 5 << 40: "5.0TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
