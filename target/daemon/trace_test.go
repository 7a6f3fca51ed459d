package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// TestDaemonTrace starts and stops a wire trace of a connected host at run
// time through the control socket (nvmetd trace), and opens the capture in
// tshark: iWARP and the NVMe-oF commands the host sent are dissected.
func TestDaemonTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	dir := isolate(t)
	port := testnode.FreePort(t)
	notifySock, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notifySock)
	const (
		subnqn  = "nqn.2014-08.org.example:trace"
		hostnqn = "nqn.2014-08.org.nvmexpress:uuid:7c9e6679-7425-40de-944b-e07fc1f90a02"
	)
	sock := filepath.Join(dir, "ctl.sock")
	cfgFile := writeFile(t, dir, "nvmetd.yaml", fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 10s}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 4MiB}}
`, sock, port, subnqn, subnqn))
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--config", cfgFile, "--log-format", "json"}, io.Discard, &stderr) }()
	select {
	case m := <-msgs:
		if !strings.HasPrefix(m, "READY=1") {
			t.Fatalf("first notification %q", m)
		}
	case c := <-code:
		t.Fatalf("nvmetd exited %d:\n%s", c, stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("not ready:\n%s", stderr.String())
	}
	defer func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case <-code:
		case <-time.After(time.Minute):
			t.Errorf("no exit after SIGTERM")
		}
	}()
	ctl := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if c := run(append(append([]string{"trace"}, args...), "--socket", sock), &out, &errb); c != 0 {
			t.Fatalf("nvmetd trace %v: exit %d: %s", args, c, errb.String())
		}
		return out.String()
	}
	if c := run([]string{"trace", "start", "--socket", sock, "-w", filepath.Join(dir, "x.pcap")}, io.Discard, io.Discard); c != exitFailure {
		t.Errorf("trace start without a selection: exit %d, want %d", c, exitFailure)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := initiator.Connect(ctx, initiator.Config{Address: fmt.Sprintf("127.0.0.1:%d", port), SubNQN: subnqn, HostNQN: hostnqn, NrIOQueues: 1, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	pcap := filepath.Join(dir, "host.pcap")
	t.Log(ctl("start", "--host", hostnqn, "-w", pcap, "--max-size", "16MiB", "--duration", "10m"))
	buf := bytes.Repeat([]byte("trace me"), 512)
	for i := range 8 {
		if _, err := c.Namespace(1).WriteAtContext(ctx, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Namespace(1).ReadAtContext(ctx, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if out := ctl("status", "-o", "json"); !strings.Contains(out, `"stopped": false`) {
		t.Errorf("status while running: %s", out)
	}
	out := ctl("stop")
	t.Log(out)
	if !strings.Contains(out, "stopped (stopped)") || !strings.Contains(out, "2 queues") {
		t.Errorf("stop: %q", out)
	}

	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (test/deps.sh installs it): the trace was taken but not dissected")
	}
	lua, _ := filepath.Abs("../../deploy/wireshark/nvmeof-iwarp.lua")
	cmd := exec.Command(bin, "-n", "-r", pcap, "-X", "lua_script:"+lua, "-o", "tcp.try_heuristic_first:TRUE", "-V")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	tout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, tout)
	}
	for _, w := range []string{"iWARP Marker Protocol data unit Aligned framing", "iWARP Direct Data Placement and Remote Direct Memory Access Protocol",
		"NVMe-oF Command Capsule", "Command: Write", "Command: Read", "NVMe-oF Response Capsule", "Status: Success"} {
		if !strings.Contains(string(tout), w) {
			t.Errorf("tshark's output lacks %q", w)
		}
	}
}
