package interop_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// guardLinuxHost is testLinuxHostGateway's phase of the gateway guard's
// refusals (issue 21, "the gateway group never has two writers"), run
// while gw-a owns ANA group 1 and the Linux host's vwriter writes through
// it. On each gateway, every path that could make it serve a second
// writer is refused and changes nothing:
//
//   - the management API adds a namespace in ANA group 7, which the
//     gateway group does not manage (it would be optimized on every gateway
//     at once, with no lease and no fence): 409, ana_group named;
//   - SIGHUP with a file that adds group 7 to the gateway section (read at
//     start only) and a namespace in it: "reload: refused" (the file is
//     restored at once: a later restart of gw-a reads it);
//   - the management API adds the image of namespace 1 again as namespace
//     3: 400, backend.image named ("is also the image of");
//   - the management API adds an image without the exclusive-lock feature
//     (nothing would stop a second client writing it): 409, the command
//     that enables it named;
//   - the management API adds an image of a pool whose configuration turns
//     librbd's write-back cache on (rbd_cache=true, pool level: an
//     acknowledged write could live only in one gateway): 400, as on a
//     stand-alone target, the setting and its removal named. The pool is
//     the test's own (created and deleted here with client.admin): never
//     the shared pool other tests use.
//
// After each case the host sees nothing new (guardHostView): namespace 1
// only, optimized through gw-a and inaccessible through gw-b. The vwriter
// keeps writing throughout; the test's final sweep judges its writes.
func guardLinuxHost(t *testing.T, vm *lab.VM, c *cephtest.Cluster, a, b *gwProc, ctrlOf map[int]string, vw *linuxWriter, image string) {
	start := time.Now()
	defer func() { t.Logf("the guard's refusals with the Linux host took %.1fs", time.Since(start).Seconds()) }()

	// The pool with rbd_cache=true: made in the background while the
	// other cases run (pool creation and rbd pool init take seconds).
	var rb [4]byte
	rand.Read(rb[:])
	pool := "nvmetd-guard-" + hex.EncodeToString(rb[:])
	var (
		poolCreated bool
		poolErr     error
		poolDeleted bool
	)
	poolDone := make(chan struct{})
	go func() {
		defer close(poolDone)
		poolCreated, poolErr = cachePool(c, pool)
	}()
	deletePool := func() {
		<-poolDone
		if !poolCreated || poolDeleted {
			return
		}
		poolDeleted = true
		if out, err := adminTool(c, "ceph", "osd", "pool", "delete", pool, pool, "--yes-i-really-really-mean-it"); err != nil {
			t.Errorf("delete pool %s: %v: %s", pool, err, out)
		}
	}
	t.Cleanup(deletePool) // a failure before the phase's own deletion

	image7 := c.CreateImage(t, 16<<20)
	noLock := c.CreateImage(t, 16<<20)
	if out, err := c.RBD("feature", "disable", c.Pool+"/"+noLock, "fast-diff", "object-map", "exclusive-lock"); err != nil {
		t.Fatalf("rbd feature disable: %v\n%s", err, out)
	}
	rbdBackend := func(pool, img, clientID, keyring string) string {
		return fmt.Sprintf(`{"kind": "rbd", "pool": %q, "image": %q, "ceph_conf": %q, "client_id": %q, "keyring": %q}`,
			pool, img, c.Conf, clientID, keyring)
	}
	nsPath := "/v1/subsystems/" + gatewayNQN + "/namespaces"
	procs := []*gwProc{a, b}
	refused := func(what, body string, status int, want ...string) {
		t.Helper()
		for _, p := range procs {
			got, answer := gwPost(t, p, nsPath, body)
			t.Logf("%s: POST %s: %d %s", p.name, what, got, compactJSON(answer))
			ok := got == status
			for _, w := range want {
				ok = ok && strings.Contains(answer, w)
			}
			if !ok {
				t.Errorf("%s: POST %s: %d %s; want %d naming %q", p.name, what, got, answer, status, want)
			}
			if n := strings.Count(gwGet(t, p, nsPath), `"nsid"`); n != 1 {
				t.Errorf("%s: %d namespaces after POST %s, want 1", p.name, n, what)
			}
		}
		guardHostView(t, vm, ctrlOf[a.port], ctrlOf[b.port], "after POST "+what)
	}

	// An ANA group the gateway group does not manage: by the API, then by
	// SIGHUP.
	refused("namespace 2 in ANA group 7", `{"nsid": 2, "ana_group": 7, "backend": `+rbdBackend(c.Pool, image7, c.ClientID, c.Keyring)+`}`,
		http.StatusConflict, `"ana_group"`, "not one of the gateway's")
	for _, p := range procs {
		file := filepath.Join(p.dir, "nvmetd.yaml")
		orig, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		y := strings.Replace(string(orig), "ana_groups: [{id: 1, preferred: gw-a}]", "ana_groups: [{id: 1, preferred: gw-a}, {id: 7, preferred: gw-a}]", 1)
		y += fmt.Sprintf("      - nsid: 2\n        ana_group: 7\n        backend: %s\n", rbdBackend(c.Pool, image7, c.ClientID, c.Keyring))
		if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		mark := p.logSize()
		p.signal(syscall.SIGHUP)
		p.waitLogFrom(`reload: (refused|configuration rejected|cannot create|the target could not)|configuration reloaded`, mark)
		// Restored at once: the daemon has read the file.
		if err := os.WriteFile(file, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		logged := p.logSince(mark)
		t.Logf("%s: SIGHUP with namespace 2 in ANA group 7:\n%s", p.name, grepLog(logged, `reload|refused|ana_group`))
		if !strings.Contains(logged, "reload: refused") || !strings.Contains(logged, "ana_group") {
			t.Errorf("%s: SIGHUP with namespace 2 in ANA group 7: not refused naming ana_group", p.name)
		}
		if n := strings.Count(gwGet(t, p, nsPath), `"nsid"`); n != 1 {
			t.Errorf("%s: %d namespaces after SIGHUP, want 1", p.name, n)
		}
	}
	guardHostView(t, vm, ctrlOf[a.port], ctrlOf[b.port], "after SIGHUP with namespace 2 in ANA group 7")

	// The image of namespace 1 again.
	refused("namespace 3 on the image of namespace 1", `{"nsid": 3, "ana_group": 1, "backend": `+rbdBackend(c.Pool, image, c.ClientID, c.Keyring)+`}`,
		http.StatusBadRequest, `"backend.image"`, "is also the image of")

	// An image without the exclusive-lock feature.
	refused("namespace 2 on an image without exclusive-lock", `{"nsid": 2, "ana_group": 1, "backend": `+rbdBackend(c.Pool, noLock, c.ClientID, c.Keyring)+`}`,
		http.StatusConflict, `"backend"`, "refused in a gateway", "rbd feature enable "+c.Pool+"/"+noLock+" exclusive-lock")

	// An image of a pool with rbd_cache=true (client.admin: the gateways'
	// client's caps are the shared pool's only).
	<-poolDone
	if poolErr != nil {
		t.Fatalf("the pool with rbd_cache=true: %v", poolErr)
	}
	refused("namespace 2 on an image of a pool with rbd_cache=true", `{"nsid": 2, "ana_group": 1, "backend": `+rbdBackend(pool, "img", "admin", c.AdminKeyring)+`}`,
		http.StatusBadRequest, `"backend"`, "rbd_cache=true", "rbd config pool rm "+pool+" rbd_cache")
	deletePool()

	vw.waitWrites(50, "after the guard's refusals")
}

// cachePool creates pool (one placement group), an rbd pool with
// rbd_cache=true in its configuration and one image, "img", with the
// default features (exclusive-lock among them). created: the pool exists
// (to delete).
func cachePool(c *cephtest.Cluster, pool string) (created bool, err error) {
	for i, cmd := range [][]string{
		{"ceph", "osd", "pool", "create", pool, "1", "1", "replicated"},
		{"rbd", "pool", "init", pool},
		{"rbd", "config", "pool", "set", pool, "rbd_cache", "true"},
		{"rbd", "create", "--size", "16M", pool + "/img"},
	} {
		out, err := adminTool(c, cmd[0], cmd[1:]...)
		if err != nil {
			return i > 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd, " "), err, out)
		}
	}
	return true, nil
}

// adminTool runs a Ceph tool (ceph, rbd) as client.admin on c.
func adminTool(c *cephtest.Cluster, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, append([]string{"--conf", c.Conf, "--name", "client.admin", "--keyring", c.AdminKeyring}, args...)...).CombinedOutput()
	return string(out), err
}

// guardHostView checks what the Linux host sees of the gateway subsystem
// through ctrlA (gw-a's controller, the owner's) and ctrlB (gw-b's):
// namespace 1 only, optimized through ctrlA and inaccessible through
// ctrlB (hostView).
func guardHostView(t *testing.T, vm *lab.VM, ctrlA, ctrlB, what string) {
	t.Helper()
	hostView(t, vm, ctrlA, ctrlB, []string{"1"}, what)
}

// hostView checks what the Linux host sees of the gateway subsystem
// through ctrlA (gw-a's controller, the owner's) and ctrlB (gw-b's): the
// namespaces nsids (in ascending order, all in ANA group 1) and no other,
// optimized through ctrlA and inaccessible through ctrlB. Each controller
// is asked directly for its ANA log page (nvme ana-log: a synchronous Get
// Log Page, whose group descriptors list every attached namespace with
// its group's state), and the kernel's paths and disks are read after a
// rescan of both controllers is forced (rescan_controller, as nvme
// ns-rescan: it queues the scan, so the controllers' answers are the part
// that does not depend on timing).
func hostView(t *testing.T, vm *lab.VM, ctrlA, ctrlB string, nsids []string, what string) {
	t.Helper()
	out := step(t, vm, time.Minute, fmt.Sprintf(`for c in %[1]s %[2]s; do echo 1 > /sys/class/nvme/$c/rescan_controller || exit 1; done
for c in %[1]s %[2]s; do
  echo "== $c"
  nvme ana-log /dev/$c || exit 1
  for p in /sys/class/nvme/$c/nvme*c*n*; do [ -e "$p" ] && read n < $p/nsid && read s < $p/ana_state && echo "path $n $s"; done
done
echo "== disks"
for b in /sys/block/nvme*n*; do case ${b##*/} in *c*) continue;; esac
  read q 2>/dev/null < $b/device/subsysnqn && [ "$q" = %[3]s ] && read n < $b/nsid && echo "disk ${b##*/} $n"
done
true`, ctrlA, ctrlB, gatewayNQN))
	want := map[string]string{ctrlA: "optimized", ctrlB: "inaccessible"}
	var ctrl string
	var problems []string
	seen := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "==":
			ctrl = f[1]
		case len(f) == 3 && f[0] == "state" && f[1] == ":":
			seen[ctrl+" state"] = []string{f[2]}
		case len(f) == 3 && f[0] == "nsid" && f[1] == ":":
			// The group's state line comes before its NSIDs.
			seen[ctrl+" ana"] = append(seen[ctrl+" ana"], f[2]+" "+strings.Join(seen[ctrl+" state"], ""))
		case len(f) == 3 && f[0] == "path":
			seen[ctrl+" path"] = append(seen[ctrl+" path"], f[1]+" "+f[2])
		case len(f) == 3 && f[0] == "disk":
			seen["disks"] = append(seen["disks"], f[2])
		}
	}
	for _, k := range []string{"disks", ctrlA + " path", ctrlB + " path", ctrlA + " ana", ctrlB + " ana"} {
		slices.Sort(seen[k])
	}
	for _, c := range []string{ctrlA, ctrlB} {
		for _, k := range []string{"ana", "path"} {
			var w []string
			for _, n := range nsids {
				w = append(w, n+" "+want[c])
			}
			if got := seen[c+" "+k]; !slices.Equal(got, w) {
				problems = append(problems, fmt.Sprintf("%s %s: %q, want %q", c, k, got, w))
			}
		}
	}
	if got := seen["disks"]; !slices.Equal(got, nsids) {
		problems = append(problems, fmt.Sprintf("the subsystem's disks' NSIDs: %q, want %q", got, nsids))
	}
	if len(problems) > 0 {
		t.Fatalf("the host %s sees:\n  %s", what, strings.Join(problems, "\n  "))
	}
}

// gwClient is an HTTP client of gateway p's control socket.
func gwClient(p *gwProc) *http.Client {
	sock := filepath.Join(p.dir, "ctl.sock")
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// gwPost POSTs body (JSON) to path on p's management API and returns the
// status and the answer.
func gwPost(t *testing.T, p *gwProc, path, body string) (int, string) {
	t.Helper()
	resp, err := gwClient(p).Post("http://nvmetd"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: POST %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// gwGet returns the answer to a GET of path on p's management API.
func gwGet(t *testing.T, p *gwProc, path string) string {
	t.Helper()
	resp, err := gwClient(p).Get("http://nvmetd" + path)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET %s: %d %s", p.name, path, resp.StatusCode, b)
	}
	return string(b)
}

// compactJSON is an answer on one line, for the log.
func compactJSON(s string) string { return strings.Join(strings.Fields(s), " ") }
