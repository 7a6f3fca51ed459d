package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestEndToEnd runs the daemon in this process with the real target on a
// loopback port, connects a host (the initiator package) through discovery,
// writes and reads, checks `nvmetd status`, adds a namespace with SIGHUP,
// and stops with SIGTERM while the host is connected.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	dir := isolate(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	notifySock, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notifySock)

	const (
		subnqn  = "nqn.2014-08.org.example:e2e"
		hostnqn = "nqn.2014-08.org.nvmexpress:uuid:7c9e6679-7425-40de-944b-e07fc1f90ae7"
	)
	sock := filepath.Join(dir, "ctl.sock")
	config := func(extraNS string) string {
		return fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 10s}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allowed_hosts: [%s]
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 16MiB}}
%s
hosts:
  - {nqn: %s, description: the test}
`, sock, port, subnqn, subnqn, hostnqn, extraNS, hostnqn)
	}
	cfgFile := writeFile(t, dir, "nvmetd.yaml", config(""))
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--config", cfgFile, "--log-format", "json"}, io.Discard, &stderr) }()
	waitMsg := func(prefix string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		codeCh := code
		exited := -1
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, prefix) {
					if exited >= 0 {
						code <- exited // for whoever waits for the exit
					}
					return
				}
			case c := <-codeCh:
				// The daemon may send its last message and exit at once;
				// what it sent is in the socket already: keep reading it
				// (until the guard) before deciding it exited too early.
				exited, codeCh = c, nil
			case <-timeout:
				if exited >= 0 {
					t.Fatalf("nvmetd exited %d before %q; log:\n%s", exited, prefix, stderr.String())
				}
				t.Fatalf("no %q; log:\n%s", prefix, stderr.String())
			}
		}
	}
	waitMsg("READY=1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)

	// Discovery lists the subsystem at the port's address.
	disc, err := initiator.Connect(ctx, initiator.Config{Address: addr, SubNQN: nvmeof.DiscoveryNQN, HostNQN: hostnqn, NoReconnect: true})
	if err != nil {
		t.Fatalf("discovery connect: %v\n%s", err, stderr.String())
	}
	dl, err := disc.DiscoveryLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range dl.Entries {
		if e.SubNQN == subnqn && e.TrAddr == "127.0.0.1" && e.TrSvcID == strconv.Itoa(port) && e.PortID == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("discovery log lacks %s at %s: %+v", subnqn, addr, dl.Entries)
	}
	disc.Close(ctx)

	// An allowed host connects, writes and reads.
	c, err := initiator.Connect(ctx, initiator.Config{Address: addr, SubNQN: subnqn, HostNQN: hostnqn, NrIOQueues: 2, NoReconnect: true})
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer func() {
		// The target has gone by now (SIGTERM below): Close must not wait
		// for it.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		_ = c.Close(cctx)
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("Close after the target left took %v", d)
		}
	}()
	ns := c.Namespace(1)
	if ns == nil || ns.Size() != 16<<20 {
		t.Fatalf("namespace 1: %v", ns)
	}
	data := bytes.Repeat([]byte("nvmetd!\n"), 512)
	if _, err := ns.WriteAtContext(ctx, data, 8192); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := ns.ReadAtContext(ctx, got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}

	// Another host is refused.
	if other, err := initiator.Connect(ctx, initiator.Config{Address: addr, SubNQN: subnqn, NoReconnect: true,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"}); err == nil {
		other.Close(ctx)
		t.Error("a host not in allowed_hosts connected")
	}

	// `nvmetd status` shows the controller and its I/O.
	st, err := fetchStatus(ctx, sock, false)
	if err != nil {
		t.Fatal(err)
	}
	var ctrl bool
	for _, cs := range st.Target.Controllers {
		if cs.HostNQN == hostnqn && cs.Subsystem == subnqn && cs.CNTLID == c.CNTLID() && cs.IOQueues == 2 &&
			cs.IO.WriteBytes >= uint64(len(data)) && cs.IO.ReadBytes >= uint64(len(data)) {
			ctrl = true
		}
	}
	if !ctrl || st.Target.Subsystems[0].Controllers != 1 {
		t.Errorf("status lacks the controller: %+v", st.Target.Controllers)
	}
	var text bytes.Buffer
	if rc := run([]string{"status", "--socket", sock}, &text, io.Discard); rc != exitOK || !strings.Contains(text.String(), hostnqn) {
		t.Errorf("status text (exit %d):\n%s", rc, text.String())
	}

	// SIGHUP adds a namespace; the host finds it.
	writeFile(t, dir, "nvmetd.yaml", config("      - {nsid: 2, backend: {kind: memory, size: 8MiB}}"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMsg("RELOADING=1")
	waitMsg("READY=1")
	deadline := time.Now().Add(20 * time.Second)
	for c.Namespace(2) == nil && time.Now().Before(deadline) {
		if err := c.Rescan(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ns2 := c.Namespace(2); ns2 == nil || ns2.Size() != 8<<20 {
		t.Errorf("namespace 2 after reload: %v", ns2)
	}
	if _, err := ns.ReadAtContext(ctx, got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Errorf("namespace 1 after reload: %v", err)
	}

	// SIGTERM with the host connected: a clean drain.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitMsg("STOPPING=1")
	select {
	case rc := <-code:
		if rc != exitOK {
			t.Errorf("exit %d; log:\n%s", rc, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit after SIGTERM; log:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"reload: subsystem `+subnqn+` namespace 2 added (memory )"`) {
		t.Errorf("log lacks the reload summary:\n%s", stderr.String())
	}
}
