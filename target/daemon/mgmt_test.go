package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// mgmtDaemon is nvmetd running in this process with the real target, for
// the management API's tests.
type mgmtDaemon struct {
	t      *testing.T
	dir    string
	file   string
	sock   string
	addr   string
	api    *ctlclient.Client
	msgs   <-chan string
	code   chan int
	stderr *syncBuffer
}

const (
	mgmtSubNQN  = "nqn.2014-08.org.example:mgmt"
	mgmtHostNQN = "nqn.2014-08.org.nvmexpress:uuid:2b0c4a44-3f2e-4e8a-9a55-0d4b0f6c1d10"
)

// startMgmtDaemon writes a configuration (one port on loopback, one
// subsystem allowing mgmtHostNQN with a memory namespace 1) and runs the
// daemon until the test ends.
func startMgmtDaemon(t *testing.T) *mgmtDaemon {
	t.Helper()
	dir := isolate(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	notify, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notify)
	md := &mgmtDaemon{t: t, dir: dir, sock: filepath.Join(dir, "ctl.sock"), addr: "127.0.0.1:" + strconv.Itoa(port),
		msgs: msgs, code: make(chan int, 1), stderr: &syncBuffer{}}
	md.file = writeFile(t, dir, "nvmetd.yaml", fmt.Sprintf(`# nvmetd for the management API test
daemon: {control_socket: %s, shutdown_timeout: 10s}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allowed_hosts: [%s]
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 16MiB}}
transport:
  connect_timeout: 10s  # kept as written
`, md.sock, port, mgmtSubNQN, mgmtSubNQN, mgmtHostNQN))
	go func() { md.code <- run([]string{"--config", md.file, "--log-format", "json"}, io.Discard, md.stderr) }()
	md.waitMsg("READY=1")
	md.api = ctlclient.New(md.sock)
	t.Cleanup(func() {
		md.api.Close()
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		select {
		case rc := <-md.code:
			if rc != exitOK {
				t.Errorf("nvmetd exit %d; log:\n%s", rc, md.stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("nvmetd did not exit after SIGTERM; log:\n%s", md.stderr.String())
		}
	})
	return md
}

// waitMsg waits for a systemd notification beginning with prefix.
func (md *mgmtDaemon) waitMsg(prefix string) {
	md.t.Helper()
	if err := md.waitNotice(prefix); err != nil {
		md.t.Fatal(err)
	}
}

// waitNotice waits for a systemd notification beginning with prefix (any
// goroutine).
func (md *mgmtDaemon) waitNotice(prefix string) error {
	timeout := time.After(60 * time.Second) // a hang guard
	for {
		select {
		case m := <-md.msgs:
			if strings.HasPrefix(m, prefix) {
				return nil
			}
		case rc := <-md.code:
			md.code <- rc // for the cleanup
			return fmt.Errorf("nvmetd exited %d before %q; log:\n%s", rc, prefix, md.stderr.String())
		case <-timeout:
			return fmt.Errorf("no %q; log:\n%s", prefix, md.stderr.String())
		}
	}
}

// do calls the API; it returns the error (a *ctlclient.Error for an answer
// other than 200).
func (md *mgmtDaemon) do(method, path string, query url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return md.api.Do(ctx, method, path, query, body, out)
}

// config returns the running configuration as the API shows it.
func (md *mgmtDaemon) config() json.RawMessage {
	md.t.Helper()
	var raw json.RawMessage
	if err := md.do("GET", "/v1/config", nil, nil, &raw); err != nil {
		md.t.Fatal(err)
	}
	return raw
}

// apiErr checks that err is an API error with status and a problem about
// field, and returns it.
func apiErr(t *testing.T, err error, status int, field string) *ctlclient.Error {
	t.Helper()
	var e *ctlclient.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an API error %d naming %s, got %v", status, field, err)
	}
	if e.Status != status || !slices.ContainsFunc(e.Problems, func(p ctlclient.Problem) bool { return p.Field == field }) {
		t.Fatalf("want %d naming %q, got %d: %s %+v", status, field, e.Status, e.Message, e.Problems)
	}
	return e
}

// TestMgmtAddNamespaceWhileConnected is the acceptance test of the
// management API: a namespace added through it while a host is connected
// reaches the host through the Namespace Attribute Changed notice (the host
// rescans on the notice; the test never asks it to), takes I/O, and the
// persisted configuration reads back through the daemon's own loader as
// what runs; the same change with an invalid parameter is refused naming
// the field, and changes nothing; an ANA state set through the API reaches
// the host as an ANA change notice; queues list with their statistics.
func TestMgmtAddNamespaceWhileConnected(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	md := startMgmtDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	events := make(chan initiator.Event, 64)
	c, err := initiator.Connect(ctx, initiator.Config{Address: md.addr, SubNQN: mgmtSubNQN, HostNQN: mgmtHostNQN,
		NrIOQueues: 2, NoReconnect: true, OnEvent: func(e initiator.Event) { events <- e }})
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, md.stderr.String())
	}
	defer c.Close(ctx)
	waitEvent := func(what string, match func(initiator.Event) bool) {
		t.Helper()
		timeout := time.After(60 * time.Second) // a hang guard, not a bound
		for {
			select {
			case e := <-events:
				if match(e) {
					return
				}
			case <-timeout:
				t.Fatalf("the host saw no %s; log:\n%s", what, md.stderr.String())
			}
		}
	}

	// An invalid parameter: refused, naming the field; nothing changes.
	before := md.config()
	fileBefore, _ := os.ReadFile(md.file)
	img := filepath.Join(md.dir, "ns2.img")
	bad := map[string]any{"nsid": 2, "backend": map[string]any{"kind": "file", "path": img, "size": "8MiB", "block_size": 1000}}
	err = md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces", url.Values{"persist": {"true"}}, bad, nil)
	e := apiErr(t, err, 400, "backend.block_size")
	if !slices.ContainsFunc(e.Problems, func(p ctlclient.Problem) bool {
		return p.ConfigField == "subsystems[0].namespaces[1].backend.block_size"
	}) {
		t.Errorf("problems lack the configuration path: %+v", e.Problems)
	}
	// Valid as configuration, but the storage cannot be opened: refused
	// when prepared, before anything changes (as a reload).
	missing := map[string]any{"nsid": 2, "backend": map[string]any{"kind": "file", "path": filepath.Join(md.dir, "nodir", "x.img"), "size": "8MiB", "must_exist": true}}
	err = md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces", nil, missing, nil)
	apiErr(t, err, 400, "backend.path")
	// An unknown key.
	err = md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces", nil, map[string]any{"nsid": 2, "backend": map[string]any{"kind": "memory", "size": "1MiB", "sise": 1}}, nil)
	apiErr(t, err, 400, "backend.sise")
	if after := md.config(); !bytes.Equal(before, after) {
		t.Errorf("a refused change changed the configuration:\n%s\n%s", before, after)
	}
	if fileAfter, _ := os.ReadFile(md.file); !bytes.Equal(fileBefore, fileAfter) {
		t.Errorf("a refused change wrote the file")
	}
	if ns := c.Namespace(2); ns != nil {
		t.Errorf("the host sees namespace 2 after refused changes")
	}

	// The valid change, persisted.
	good := map[string]any{"nsid": 2, "backend": map[string]any{"kind": "file", "path": img, "size": "8MiB"}}
	var res changeResult
	if err := md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces", url.Values{"persist": {"true"}}, good, &res); err != nil {
		t.Fatalf("add namespace: %v", err)
	}
	if res.NSID != 2 || !res.Persisted || !slices.ContainsFunc(res.Changes, func(s string) bool { return strings.Contains(s, "namespace 2 added") }) {
		t.Errorf("answer: %+v", res)
	}
	waitEvent("namespace 2 (Namespace Attribute Changed, rescan)", func(e initiator.Event) bool {
		return e.Kind == initiator.EventNamespacesChanged && slices.Contains(e.NSIDs, 2)
	})
	ns2 := c.Namespace(2)
	if ns2 == nil || ns2.Size() != 8<<20 {
		t.Fatalf("namespace 2 on the host: %v", ns2)
	}
	data := bytes.Repeat([]byte("mgmt api"), 1024)
	if _, err := ns2.WriteAtContext(ctx, data, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := ns2.ReadAtContext(ctx, got, 4096); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back from namespace 2: %v", err)
	}
	if onDisk, err := os.ReadFile(img); err != nil || !bytes.Equal(onDisk[4096:4096+len(data)], data) {
		t.Errorf("the image file lacks the write: %v", err)
	}

	// The persisted file: the daemon's own loader reads what runs; the
	// sections the API does not touch (and their comments) are as written.
	lc, err := load(t, "--config", md.file)
	if err != nil {
		t.Fatalf("the persisted file does not load: %v", err)
	}
	var running map[string]any
	if err := json.Unmarshal(md.config(), &running); err != nil {
		t.Fatal(err)
	}
	var loaded map[string]any
	b, _ := json.Marshal(target.EncodeJSON(lc.Target))
	if err := json.Unmarshal(b, &loaded); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(running) != fmt.Sprint(loaded) {
		t.Errorf("the persisted configuration reads back differently:\nrunning %v\nloaded  %v", running, loaded)
	}
	text, _ := os.ReadFile(md.file)
	for _, want := range []string{"# nvmetd for the management API test", "connect_timeout: 10s # kept as written", "nsid: 2", img} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the persisted file lacks %q:\n%s", want, text)
		}
	}
	var st daemonStatus
	if err := md.do("GET", statusPath, nil, nil, &st); err != nil || st.Unsaved {
		t.Errorf("status after a persisted change: unsaved %v, %v", st.Unsaved, err)
	}

	// Resize: the host sees the new capacity through the notice.
	if err := md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces/2/resize", nil, map[string]any{"size": "12MiB"}, &res); err != nil {
		t.Fatalf("resize: %v", err)
	}
	waitEvent("namespace 2 resized", func(e initiator.Event) bool {
		return e.Kind == initiator.EventNamespacesChanged && slices.Contains(e.NSIDs, 2) && c.Namespace(2) != nil && c.Namespace(2).Size() == 12<<20
	})
	err = md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces/2/resize", nil, map[string]any{"size": "12 parsecs"}, nil)
	apiErr(t, err, 400, "size")
	if err := md.do("GET", statusPath, nil, nil, &st); err != nil || !st.Unsaved {
		t.Errorf("status after an unsaved change: unsaved %v, %v", st.Unsaved, err)
	}
	var human bytes.Buffer
	if rc := run([]string{"status", "--socket", md.sock}, &human, io.Discard); rc != exitOK ||
		!strings.Contains(human.String(), "last change (nvmetctl): ") || !strings.Contains(human.String(), "unsaved changes:") {
		t.Errorf("nvmetd status (exit %d):\n%s", rc, human.String())
	}

	// ANA: a state set through the API is an ANA change notice to the
	// hosts on that port. (The initiator does not enable the notice
	// itself, as it does not do multipath: enable it as Linux does.)
	var sqe nvmeof.SQE
	sqe.BuildSetFeatures(nvmeof.FeatAsyncEventConfig, 0, nvmeof.AECNSAttr|nvmeof.AECANAChange, false)
	if _, err := c.AdminCommand(ctx, &sqe, nil, false); err != nil {
		t.Fatalf("Set Features (Asynchronous Event Configuration): %v", err)
	}
	if err := md.do("PUT", "/v1/ports/1/ana_groups/1", nil, map[string]any{"state": "non-optimized"}, &res); err != nil {
		t.Fatalf("ana set: %v", err)
	}
	waitEvent("ANA change notice", func(e initiator.Event) bool {
		return e.Kind == initiator.EventAsync && e.AEN.Type() == nvmeof.AERTypeNotice && e.AEN.Info() == nvmeof.AERNoticeANAChange
	})
	err = md.do("PUT", "/v1/ports/1/ana_groups/1", nil, map[string]any{"state": "sideways"}, nil)
	apiErr(t, err, 400, "state")
	err = md.do("PUT", "/v1/ports/9/ana_groups/1", nil, map[string]any{"state": "optimized"}, nil)
	apiErr(t, err, 404, "port_id")

	// Controllers and queues, with their statistics.
	var ctrls []target.ControllerStatus
	if err := md.do("GET", "/v1/controllers", nil, nil, &ctrls); err != nil || len(ctrls) != 1 || ctrls[0].HostNQN != mgmtHostNQN {
		t.Fatalf("controllers: %+v %v", ctrls, err)
	}
	var queues []target.QueueStatus
	if err := md.do("GET", "/v1/queues", nil, nil, &queues); err != nil {
		t.Fatal(err)
	}
	var qids []uint16
	var wbytes uint64
	for _, q := range queues {
		if q.CNTLID == ctrls[0].CNTLID {
			qids = append(qids, q.QID)
			wbytes += q.IO.WriteBytes
		}
	}
	if !slices.Equal(qids, []uint16{0, 1, 2}) || wbytes < uint64(len(data)) {
		t.Errorf("queues: qids %v, %d bytes written; %+v", qids, wbytes, queues)
	}

	// Removing the namespace: the host sees it go.
	if err := md.do("DELETE", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces/2", nil, nil, &res); err != nil {
		t.Fatal(err)
	}
	waitEvent("namespace 2 removed", func(e initiator.Event) bool {
		return e.Kind == initiator.EventNamespacesChanged && slices.Contains(e.NSIDs, 2) && c.Namespace(2) == nil
	})
}

// TestMgmtPersistRefusesConcurrentEdit: a file edited since the daemon
// read it is not overwritten (unless forced).
func TestMgmtPersistRefusesConcurrentEdit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	md := startMgmtDaemon(t)
	doc, _ := os.ReadFile(md.file)
	edited := append(doc, []byte("# an edit not yet reloaded\n")...)
	if err := os.WriteFile(md.file, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	host := map[string]any{"nqn": "nqn.2014-08.org.example:host-a", "description": "a"}
	err := md.do("POST", "/v1/hosts", url.Values{"persist": {"true"}}, host, nil)
	var e *ctlclient.Error
	if !errors.As(err, &e) || e.Status != 409 || !e.Applied {
		t.Fatalf("want 409 (applied, not persisted), got %v", err)
	}
	if now, _ := os.ReadFile(md.file); sha256.Sum256(now) != sha256.Sum256(edited) {
		t.Fatal("the edited file was overwritten")
	}
	if err := md.do("POST", "/v1/save", url.Values{"force": {"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(md.file); !strings.Contains(string(now), "host-a") {
		t.Fatalf("forced save lacks the host:\n%s", now)
	}
}

// TestMgmtRacesReload runs API changes and SIGHUP reloads at once (run it
// under -race): they are serialized, every answer is a success or a
// refusal, and at the end the target serves exactly the configuration of
// record.
func TestMgmtRacesReload(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	md := startMgmtDaemon(t)
	const rounds = 20
	done := make(chan error, 3)
	go func() {
		for i := range rounds {
			nsid := 10 + i%5
			ns := map[string]any{"nsid": nsid, "backend": map[string]any{"kind": "memory", "size": "1MiB"}}
			err := md.do("POST", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces", nil, ns, nil)
			var e *ctlclient.Error
			if err != nil && !(errors.As(err, &e) && e.Status == 409) {
				done <- fmt.Errorf("add namespace %d: %w", nsid, err)
				return
			}
			err = md.do("DELETE", "/v1/subsystems/"+url.PathEscape(mgmtSubNQN)+"/namespaces/"+strconv.Itoa(nsid), nil, nil, nil)
			if err != nil && !(errors.As(err, &e) && e.Status == 404) { // a reload may have removed it
				done <- fmt.Errorf("remove namespace %d: %w", nsid, err)
				return
			}
		}
		done <- nil
	}()
	go func() {
		for i := range rounds {
			err := md.do("PUT", "/v1/ports/1/ana_groups/2", nil, map[string]any{"state": []string{"optimized", "inaccessible"}[i%2]}, nil)
			if err != nil {
				done <- fmt.Errorf("ana set: %w", err)
				return
			}
			var st daemonStatus
			if err := md.do("GET", statusPath, nil, nil, &st); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	go func() {
		for range rounds / 2 {
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				done <- err
				return
			}
			if err := md.waitNotice("READY=1"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("%v; log:\n%s", err, md.stderr.String())
		}
	}
	// The configuration of record and what the target serves agree.
	var cfg target.Config
	if err := target.DecodeJSON(md.config(), &cfg); err != nil {
		t.Fatal(err)
	}
	var st daemonStatus
	if err := md.do("GET", statusPath, nil, nil, &st); err != nil {
		t.Fatal(err)
	}
	var want, have []uint32
	for _, n := range cfg.Subsystems[0].Namespaces {
		want = append(want, n.NSID)
	}
	for _, n := range st.Target.Subsystems[0].Namespaces {
		if n.State == target.NamespaceOnline {
			have = append(have, n.NSID)
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Errorf("configuration of record has namespaces %v, the target serves %v", want, have)
	}
}

// TestMgmtEditsThroughAPI covers the modifications (PATCH) and the
// refusals of each kind of object: identities cannot change, unknown
// objects are 404, existing ones 409, a port on an address in use is
// refused naming address, and each refusal leaves the configuration as it
// was.
func TestMgmtEditsThroughAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	md := startMgmtDaemon(t)
	sub := "/v1/subsystems/" + url.PathEscape(mgmtSubNQN)
	var res changeResult
	if err := md.do("PATCH", sub, nil, map[string]any{"model": "patched", "allowed_hosts": []string{mgmtHostNQN, "nqn.2014-08.org.example:h2"}}, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Changes, "subsystem "+mgmtSubNQN+" changed: model, allowed_hosts") {
		t.Errorf("patch subsystem: %v", res.Changes)
	}
	if err := md.do("PATCH", sub+"/namespaces/1", nil, map[string]any{"backend": map[string]any{"size": "32MiB"}}, &res); err != nil ||
		!slices.Contains(res.Changes, "subsystem "+mgmtSubNQN+" namespace 1 changed: backend.size") {
		t.Errorf("patch namespace: %v %v", res.Changes, err)
	}
	var n map[string]any
	if err := md.do("GET", sub+"/namespaces/1", nil, nil, &n); err != nil || n["backend"].(map[string]any)["size"] != "32MiB" || n["backend"].(map[string]any)["kind"] != "memory" {
		t.Errorf("namespace after patch: %v %v", n, err)
	}
	if err := md.do("PATCH", "/v1/ports/1", nil, map[string]any{"max_queue_size": 64}, &res); err != nil ||
		!slices.Contains(res.Changes, "port 1 changed: max_queue_size") {
		t.Errorf("patch port: %v %v", res.Changes, err)
	}
	before := md.config()
	apiErr(t, md.do("PATCH", sub+"/namespaces/1", nil, map[string]any{"nsid": 5}, nil), 400, "nsid")
	apiErr(t, md.do("PATCH", "/v1/ports/1", nil, map[string]any{"id": 3}, nil), 400, "id")
	apiErr(t, md.do("PATCH", sub, nil, map[string]any{"nqn": "nqn.2014-08.org.example:other"}, nil), 400, "nqn")
	apiErr(t, md.do("PATCH", sub, nil, map[string]any{"serial": strings.Repeat("x", 21)}, nil), 400, "serial")
	apiErr(t, md.do("PATCH", "/v1/ports/1", nil, map[string]any{"max_queue_size": 1}, nil), 400, "max_queue_size")
	apiErr(t, md.do("POST", "/v1/subsystems", nil, map[string]any{"nqn": mgmtSubNQN}, nil), 409, "nqn")
	apiErr(t, md.do("POST", "/v1/subsystems", nil, map[string]any{"nqn": "not an nqn"}, nil), 400, "nqn")
	apiErr(t, md.do("DELETE", "/v1/subsystems/nqn.2014-08.org.example:none", nil, nil, nil), 404, "nqn")
	apiErr(t, md.do("DELETE", "/v1/hosts/nqn.2014-08.org.example:none", nil, nil, nil), 404, "nqn")
	apiErr(t, md.do("POST", "/v1/ports", nil, map[string]any{"id": 1, "address": "127.0.0.1"}, nil), 409, "id")
	// An address someone else listens on: refused when prepared.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	apiErr(t, md.do("POST", "/v1/ports", nil, map[string]any{"address": "127.0.0.1", "service_id": busy}, nil), 400, "address")
	apiErr(t, md.do("PUT", "/v1/log_level", nil, map[string]any{"level": "loud"}, nil), 400, "level")
	if after := md.config(); !bytes.Equal(before, after) {
		t.Errorf("refused changes changed the configuration:\n%s\n%s", before, after)
	}

	// A port added, a subsystem linked to it, and removed again.
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	res = changeResult{}
	if err := md.do("POST", "/v1/ports", nil, map[string]any{"address": "127.0.0.1", "service_id": freePort}, &res); err != nil || res.PortID != 2 {
		t.Fatalf("add port: %+v %v", res, err)
	}
	if err := md.do("PUT", "/v1/ports/2/subsystems/"+url.PathEscape(mgmtSubNQN), nil, nil, &res); err != nil ||
		!slices.Contains(res.Changes, "port 2 changed: subsystems") {
		t.Errorf("link: %v %v", res.Changes, err)
	}
	if err := md.do("DELETE", "/v1/ports/2", nil, nil, &res); err != nil {
		t.Error(err)
	}
}

// gatedTarget is the fake target whose Reload of a configuration with
// namespace 7 waits for release, and which records Reloads that overlap.
type gatedTarget struct {
	*fakeTarget
	entered  chan struct{}
	release  chan struct{}
	inflight atomic.Int32
	overlap  atomic.Bool
}

func (g *gatedTarget) Reload(cfg *target.Config) error {
	if g.inflight.Add(1) > 1 {
		g.overlap.Store(true)
	}
	defer g.inflight.Add(-1)
	if _, _, err := cfg.Namespace("nqn.2014-08.org.example:a", 7); err == nil {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.fakeTarget.Reload(cfg)
}

// TestChangeSerializedWithReload: a SIGHUP reload that comes while an API
// change is being applied waits for it, then works from its result (the
// file lacks the change, so the reload removes it), and the configuration
// of record is the reload's.
func TestChangeSerializedWithReload(t *testing.T) {
	dir := isolate(t)
	file := writeFile(t, dir, "nvmetd.yaml", daemonConfigYAML(filepath.Join(dir, "ctl.sock"), ""))
	o, fs, err := parseFlags([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := loadConfig(o, fs, true)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedTarget{fakeTarget: newFakeTarget(lc.Target), entered: make(chan struct{}, 1), release: make(chan struct{})}
	d := &daemon{log: zap.NewNop(), level: zap.NewAtomicLevel(), notify: func(string) {}, cur: lc, t: g,
		load: func() (*loadedConfig, error) { return loadConfig(o, fs, true) }}

	changed := make(chan error, 1)
	go func() {
		_, err := d.change(httptest.NewRequest("POST", "/v1/subsystems/x/namespaces", nil), "add namespace",
			func(c *target.Config, _ *changeResult) (string, error) {
				_, _, err := c.AddNamespace("nqn.2014-08.org.example:a", target.NamespaceConfig{NSID: 7, Backend: target.BackendConfig{Kind: "memory", Size: "1MiB"}})
				return "", err
			})
		changed <- err
	}()
	<-g.entered // the change is inside the target's Reload
	reloaded := make(chan struct{})
	go func() {
		d.reload()
		close(reloaded)
	}()
	// The reload queues behind the change (or, were it not serialized,
	// reaches the target at once: an overlap).
	guard := time.After(60 * time.Second)
	for d.changeMu.waiters.Load() == 0 && !g.overlap.Load() {
		select {
		case <-guard:
			t.Fatal("the reload neither waited for the change nor reached the target")
		case <-reloaded:
			t.Fatal("the reload finished while the change was being applied")
		default:
			runtime.Gosched()
		}
	}
	if g.overlap.Load() {
		t.Fatal("the reload reached the target while the change was being applied")
	}
	if st := d.snapshot(false); st.Pending != 1 {
		t.Errorf("status: %d pending, want 1", st.Pending)
	}
	close(g.release)
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	<-reloaded
	if g.overlap.Load() {
		t.Error("reloads overlapped")
	}
	d.mu.Lock()
	last, cur, unsaved := d.lastReload, d.cur, d.unsaved
	d.mu.Unlock()
	if last == nil || !slices.Contains(last.Changes, "subsystem nqn.2014-08.org.example:a namespace 7 removed") {
		t.Errorf("the reload did not start from the change's result: %+v", last)
	}
	if _, _, err := cur.Target.Namespace("nqn.2014-08.org.example:a", 7); err == nil || unsaved {
		t.Errorf("after the reload the configuration of record has namespace 7 (unsaved %v)", unsaved)
	}
	g.mu.Lock()
	n := len(g.reloads)
	g.mu.Unlock()
	if n != 2 {
		t.Errorf("%d target reloads, want 2", n)
	}
}
