//go:build rbd

package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// post POSTs body (JSON) to path through the process's control socket and
// returns the status and the answer.
func (p *gwProc) post(path, body string) (int, string) {
	p.t.Helper()
	c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(p.dir, "ctl.sock"))
	}}}
	resp, err := c.Post("http://nvmetd"+path, "application/json", strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("%s POST %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGatewayProcessGuard: an nvmetd-rbd gateway that owns ANA group 1
// (namespace 1 on an RBD image). Every path that could make it serve a
// second writer is refused, nothing changes, and nothing else is served
// optimized:
//   - the management API adds a namespace in ANA group 7, which no gateway
//     manages (it would be optimized on every gateway at once): 409, the
//     field named;
//   - the management API adds the image of namespace 1 again as namespace
//     3: refused, the image named as already open;
//   - the management API adds an image without the exclusive-lock feature:
//     409 (ErrGatewayGuard), the command that enables it named; one whose
//     metadata sets rbd_cache=true: 400, as on a stand-alone target;
//   - SIGHUP with a file that adds group 7 to the gateway section and a
//     namespace in it (the gateway section is read at start only, so the
//     target would serve group 7 unmanaged): refused;
//   - a host that connects afterwards sees only group 1 (namespace 1)
//     optimized;
//   - another RADOS client (another gateway, or a stand-alone nvmetd on
//     the image) cannot write the image while the gateway owns the group:
//     the gateway holds librbd's exclusive lock.
func TestGatewayProcessGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with an nvmetd-rbd process and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	image7 := c.CreateImage(t, 16<<20)
	bin := buildGateway(t)
	var rb [4]byte
	rand.Read(rb[:])
	group := "g" + hex.EncodeToString(rb[:])
	d := t.TempDir()
	// The file-held group configuration: its SIGHUP re-reads the file's
	// subsystems, which the guard must refuse. (With the default,
	// group_config: rados, a SIGHUP keeps the group's configuration and
	// the API's change is validated for the whole group:
	// TestGatewayProcessGroupConfig.)
	p := &gwProc{t: t, name: "gw-a", bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t), extra: "  group_config: file\n"}
	p.writeConfig(c, image, group, 1)
	p.start()
	t.Cleanup(func() {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait()
		}
		if t.Failed() {
			t.Logf("%s log (end):\n%s", p.name, tail(p.stderr.String(), 6000))
		}
	})
	p.waitLog(`group 1: set-ana optimized`, 0)

	nsCount := func() int {
		return strings.Count(p.get("ctl.sock", "/v1/subsystems/"+gwSubNQN+"/namespaces"), `"nsid"`)
	}
	rbdBackend := func(img string) string {
		return fmt.Sprintf(`{"kind": "rbd", "pool": %q, "image": %q, "ceph_conf": %q, "client_id": %q, "keyring": %q}`,
			c.Pool, img, c.Conf, c.ClientID, c.Keyring)
	}
	path := "/v1/subsystems/" + gwSubNQN + "/namespaces"

	// A namespace in ANA group 7.
	status, body := p.post(path, `{"nsid": 2, "ana_group": 7, "backend": `+rbdBackend(image7)+`}`)
	t.Logf("POST namespace 2 in ANA group 7: %d %s", status, body)
	if status != http.StatusConflict || !strings.Contains(body, `"ana_group"`) || !strings.Contains(body, "not one of the gateway's") {
		t.Errorf("POST namespace 2 in ANA group 7: %d %s; want 409 naming ana_group", status, body)
	}
	// The image of namespace 1 as namespace 3.
	status, body = p.post(path, `{"nsid": 3, "ana_group": 1, "backend": `+rbdBackend(image)+`}`)
	t.Logf("POST namespace 3 on the image of namespace 1: %d %s", status, body)
	if status != http.StatusBadRequest || !strings.Contains(body, `"backend.image"`) || !strings.Contains(body, "is also the image of") {
		t.Errorf("POST namespace 3 on the image of namespace 1: %d %s; want 400 naming backend.image", status, body)
	}
	// An image without the exclusive-lock feature: a gateway rule (a
	// stand-alone target serves it, with a warning), so 409 as for group 7,
	// the command that enables the feature named.
	noLock := c.CreateImage(t, 16<<20)
	if out, err := c.RBD("feature", "disable", c.Pool+"/"+noLock, "fast-diff", "object-map", "exclusive-lock"); err != nil {
		t.Fatalf("rbd feature disable: %v\n%s", err, out)
	}
	status, body = p.post(path, `{"nsid": 2, "ana_group": 1, "backend": `+rbdBackend(noLock)+`}`)
	t.Logf("POST namespace 2 on an image without exclusive-lock: %d %s", status, body)
	if want := "rbd feature enable " + c.Pool + "/" + noLock + " exclusive-lock"; status != http.StatusConflict ||
		!strings.Contains(body, `"backend"`) || !strings.Contains(body, "refused in a gateway") || !strings.Contains(body, want) {
		t.Errorf("POST namespace 2 on an image without exclusive-lock: %d %s; want 409 naming backend and %q", status, body, want)
	}
	// An image whose metadata turns librbd's write-back cache on: refused
	// by every target (the backend does not open), so 400, as any storage
	// that does not open; the setting and its removal named.
	cached := c.CreateImage(t, 16<<20)
	if out, err := c.RBD("config", "image", "set", c.Pool+"/"+cached, "rbd_cache", "true"); err != nil {
		t.Fatalf("rbd config image set: %v\n%s", err, out)
	}
	status, body = p.post(path, `{"nsid": 2, "ana_group": 1, "backend": `+rbdBackend(cached)+`}`)
	t.Logf("POST namespace 2 on an image with rbd_cache=true: %d %s", status, body)
	if status != http.StatusBadRequest || !strings.Contains(body, `"backend"`) || !strings.Contains(body, "rbd_cache=true") ||
		!strings.Contains(body, "rbd config image rm") {
		t.Errorf("POST namespace 2 on an image with rbd_cache=true: %d %s; want 400 naming backend and rbd_cache=true", status, body)
	}
	if n := nsCount(); n != 1 {
		t.Errorf("%d namespaces after the API's refusals, want 1", n)
	}

	// SIGHUP: group 7 in the file's gateway section, and a namespace in it.
	b, err := os.ReadFile(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "ana_groups: [{id: 1, preferred: gw-a}]", "ana_groups: [{id: 1, preferred: gw-a}, {id: 7, preferred: gw-a}]", 1)
	y += fmt.Sprintf("      - nsid: 2\n        ana_group: 7\n        backend: %s\n", rbdBackend(image7))
	if err := os.WriteFile(p.cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	mark := len(p.stderr.String())
	p.signal(syscall.SIGHUP)
	end := p.waitLog(`(reload: refused|configuration reloaded|reload applied)`, mark)
	logged := p.stderr.String()[mark:end]
	t.Logf("SIGHUP with namespace 2 in group 7:\n%s", grepLines(logged, `reload|gateway|refused`))
	if !strings.Contains(logged, "reload: refused") || !strings.Contains(logged, "ana_group") {
		t.Errorf("SIGHUP with namespace 2 in group 7: not refused")
	}
	if n := nsCount(); n != 1 {
		t.Errorf("%d namespaces after SIGHUP, want 1 (namespace 2 would be optimized in group 7)", n)
	}

	// A host that connects now (it reads the ANA log as it sets up) sees
	// namespace 1 optimized in group 1, and nothing else optimized.
	s := initiator.NewSubsystem(gwSubNQN, initiator.MultipathConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_ = s.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	hp, err := s.AddPath(ctx, initiator.Config{Address: p.addr(), SubNQN: gwSubNQN, HostNQN: gwHostNQN, NrIOQueues: 1, QueueSize: 16})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitOptimized(t, hp)
	for _, g := range hp.ANAGroups() {
		t.Logf("host: ANA group %d %v, NSIDs %v", g.ID, g.State, g.NSIDs)
		if g.ID != 1 && len(g.NSIDs) > 0 && g.State == nvmeof.ANAOptimized {
			t.Errorf("host: ANA group %d optimized with namespaces %v", g.ID, g.NSIDs)
		}
	}
	for _, nsid := range []uint32{2, 3} {
		if st := hp.ANAState(nsid); st == nvmeof.ANAOptimized {
			t.Errorf("host: namespace %d optimized", nsid)
		}
	}

	// Another client cannot write the image the gateway serves.
	other, err := backend.OpenRBD(backend.RBDOptions{Pool: c.Pool, Image: image, CephConf: c.Conf, ClientID: c.ClientID,
		Keyring: c.Keyring, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = other.WriteAt(make([]byte, 4096), 0, false)
	t.Logf("another client's write while the gateway owns the group: %v", err)
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "exclusive lock is held") {
		t.Errorf("another client's write while the gateway owns the group: %v; want ErrUnavailable (the exclusive lock)", err)
	}
}

// TestGatewayProcessNoExclusiveLock: a gateway whose namespace's image
// lacks the exclusive-lock feature does not join the group: it exits with
// an error that names the command enabling the feature, and never serves
// the group optimized.
func TestGatewayProcessNoExclusiveLock(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with an nvmetd-rbd process and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	if out, err := c.RBD("feature", "disable", c.Pool+"/"+image, "fast-diff", "object-map", "exclusive-lock"); err != nil {
		t.Fatalf("rbd feature disable: %v\n%s", err, out)
	}
	bin := buildGateway(t)
	var rb [4]byte
	rand.Read(rb[:])
	d := t.TempDir()
	p := &gwProc{t: t, name: "gw-a", bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t)}
	p.writeConfig(c, image, "x"+hex.EncodeToString(rb[:]), 1)
	p.stderr = &syncBuffer{}
	p.cmd = exec.Command(p.bin, "--config", p.cfg)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "XDG_RUNTIME_DIR=" + p.dir, "XDG_STATE_HOME=" + p.dir}
	p.cmd.Stderr, p.cmd.Stdout = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		p.status = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	code := p.wait()
	log := p.stderr.String()
	t.Logf("exit %d:\n%s", code, grepLines(log, `gateway|exclusive-lock`))
	want := "rbd feature enable " + c.Pool + "/" + image + " exclusive-lock"
	if code == 0 || !strings.Contains(log, want) || strings.Contains(log, "set-ana optimized") {
		t.Fatalf("exit %d; want a failure naming %q and no optimized group:\n%s", code, want, tail(log, 4000))
	}
}
