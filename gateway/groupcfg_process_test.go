//go:build rbd

package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// groupVersion is the version of the group's configuration the process
// runs (its status), and the NSIDs its management API lists.
func (p *gwProc) groupVersion() (uint64, []uint32) {
	p.t.Helper()
	var st struct {
		Gateway struct {
			Version uint64 `json:"group_config_version"`
			Pending string `json:"group_config_pending"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(p.get("ctl.sock", "/v1/status")), &st); err != nil {
		p.t.Fatalf("%s status: %v", p.name, err)
	}
	var ns []struct {
		NSID uint32 `json:"nsid"`
	}
	if err := json.Unmarshal([]byte(p.get("ctl.sock", "/v1/subsystems/"+gwSubNQN+"/namespaces")), &ns); err != nil {
		p.t.Fatalf("%s namespaces: %v", p.name, err)
	}
	var ids []uint32
	for _, n := range ns {
		ids = append(ids, n.NSID)
	}
	slices.Sort(ids)
	return st.Gateway.Version, ids
}

// waitGroup waits until the process runs version v with the NSIDs ids.
func (p *gwProc) waitGroup(v uint64, ids []uint32) {
	p.t.Helper()
	deadline := time.Now().Add(hang)
	for {
		gv, got := p.groupVersion()
		if gv == v && slices.Equal(got, ids) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: runs version %d with namespaces %v, want version %d with %v", p.name, gv, got, v, ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGatewayProcessGroupConfig (issue 27): two nvmetd-rbd gateways whose
// group's configuration is held in RADOS (gateway.group_config: rados).
// gw-a seeds version 1 from its file; a namespace added once through
// gw-a's management API is stored as version 2 and applied by gw-b (its
// API lists it, its status runs version 2; its running version is in the
// config object), and the host connected to both sees it on both paths
// (optimized through gw-a, inaccessible through gw-b) and writes it; a
// change that would break an invariant is refused as a
// whole with nothing stored, whichever gateway it is sent to: the image
// of namespace 2 again, and a new subsystem on which gw-b's CNTLID range
// (it has no gateway.cntlid_min/max: every CNTLID) overlaps gw-a's, and
// an image without the exclusive-lock feature (refused by the gateway
// guard when gw-b opens it, before anything is stored); two
// changes sent at once to both gateways on the same base version: exactly
// one is stored (200), the other is refused with 409 naming the version
// it lost to, and both gateways then run it; after a restart of both
// (their files still hold namespace 1 only) both serve the stored
// version. A SIGHUP keeps the group's configuration (not the file's);
// `nvmetctl --group` removes a namespace for the group through gw-b. A
// version that gw-b cannot apply (a namespace whose keyring it cannot
// read) leaves it running the one before, with the reason in its status
// and nvmetctl group showing it behind; changes through it are refused
// until it caught up, which it does by itself once it can.
func TestGatewayProcessGroupConfig(t *testing.T) {
	c := cephtest.Shared(t)
	// The images of the namespaces the test adds: created first, so that
	// they are removed after the processes stop (cleanups run last first).
	img2, img3, img4 := c.CreateImage(t, 8<<20), c.CreateImage(t, 8<<20), c.CreateImage(t, 8<<20)
	noLock, img6 := c.CreateImage(t, 8<<20), c.CreateImage(t, 8<<20)
	if out, err := c.RBD("feature", "disable", c.Pool+"/"+noLock, "fast-diff", "object-map", "exclusive-lock"); err != nil {
		t.Fatalf("rbd feature disable: %v\n%s", err, out)
	}
	pr := startGatewayPairOn(t, c, func(a, b *gwProc) {
		a.extra = "  group_config: rados\n  cntlid_min: 1001\n  cntlid_max: 2000\n"
		b.extra = "  group_config: rados\n"
	})
	a, b := pr.a, pr.b
	a.waitGroup(1, []uint32{1})
	b.waitGroup(1, []uint32{1})
	rbdBackend := func(img string) string {
		return fmt.Sprintf(`{"kind": "rbd", "pool": %q, "image": %q, "ceph_conf": %q, "client_id": %q, "keyring": %q}`,
			c.Pool, img, c.Conf, c.ClientID, c.Keyring)
	}
	path := "/v1/subsystems/" + gwSubNQN + "/namespaces"
	obj := gateway.ConfigObjectName(a.group)
	stored := func() string { return admin(t, c, "rados", "-p", c.Pool, "get", obj, "-") }

	// Added once, through gw-a, asked to persist: the group's change has
	// its record in RADOS, so the file is left alone (it keeps gw-a's
	// own parts; its subsystems seed nothing now) and nothing is
	// "unsaved" (a reload keeps the stored version).
	fileBefore, err := os.ReadFile(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	status, body := a.post(path+"?persist=true", `{"nsid": 2, "ana_group": 1, "backend": `+rbdBackend(img2)+`}`)
	if status != 200 || !strings.Contains(body, `"group_version": 2`) {
		t.Fatalf("add namespace 2 through gw-a: %d %s", status, body)
	}
	if fileAfter, _ := os.ReadFile(a.cfg); !strings.Contains(body, "not persisted to the file") || strings.Contains(body, `"persisted": true`) ||
		!bytes.Equal(fileAfter, fileBefore) {
		t.Fatalf("a group change with persist=true: %s; file changed: %v", body, !bytes.Equal(fileAfter, fileBefore))
	}
	if st := a.get("ctl.sock", "/v1/status"); strings.Contains(st, "unsaved_changes") {
		t.Fatalf("gw-a says it has unsaved changes after a change stored in RADOS: %s", grepLines(st, "unsaved"))
	}
	a.waitGroup(2, []uint32{1, 2})
	b.waitGroup(2, []uint32{1, 2})
	if out := admin(t, c, "rados", "-p", c.Pool, "getomapval", obj, gateway.RunningKeyPrefix+"gw-b", "/dev/stdout"); !strings.Contains(out, "2") {
		t.Fatalf("gw-b's running version in the config object: %q", out)
	}
	// The host (connected to both) sees namespace 2 on both paths (each
	// gateway's Namespace Attribute Changed notice makes it rescan), with
	// the ANA states of group 1: optimized through gw-a, its owner,
	// inaccessible through gw-b; and writes and reads it back.
	deadline := time.Now().Add(hang)
	for pr.s.Namespace(2) == nil || pr.pa.ANAState(2) != nvmeof.ANAOptimized || pr.pb.ANAState(2) != nvmeof.ANAInaccessible {
		if time.Now().After(deadline) {
			t.Fatalf("the host: namespace 2 %v, through gw-a %v, through gw-b %v", pr.s.Namespace(2) != nil, pr.pa.ANAState(2), pr.pb.ANAState(2))
		}
		time.Sleep(50 * time.Millisecond)
	}
	h2 := pr.s.Namespace(2)
	blk := bytes.Repeat([]byte("group-config-v2 "), 256)
	if _, err := h2.WriteAt(blk, 0); err != nil {
		t.Fatalf("write namespace 2: %v", err)
	}
	back := make([]byte, len(blk))
	if _, err := h2.ReadAt(back, 0); err != nil || !bytes.Equal(back, blk) {
		t.Fatalf("read namespace 2 back: %v (equal %v)", err, bytes.Equal(back, blk))
	}

	// Invariants, each refused as a whole with nothing stored.
	status, body = b.post(path, `{"nsid": 3, "ana_group": 1, "backend": `+rbdBackend(img2)+`}`)
	if status != 400 || !strings.Contains(body, "an image can be one namespace only") {
		t.Fatalf("the image of namespace 2 again, through gw-b: %d %s", status, body)
	}
	t.Logf("the same image twice: %d %s", status, body)
	status, body = a.post("/v1/subsystems", `{"nqn": "nqn.2024-01.io.nvmetd:group-second", "allow_any_host": true}`)
	if status != 400 || !strings.Contains(body, "cntlid 1001-2000 of gateway gw-a overlaps 1-65519 of gateway gw-b") {
		t.Fatalf("a subsystem on which gw-b's CNTLIDs overlap gw-a's: %d %s", status, body)
	}
	t.Logf("overlapping CNTLIDs: %d %s", status, body)
	// Refused by the path that serves (the gateway guard, when the
	// gateway that takes the change opens the image): nothing stored.
	status, body = b.post(path, `{"nsid": 5, "ana_group": 1, "backend": `+rbdBackend(noLock)+`}`)
	if status != 409 || !strings.Contains(body, "rbd feature enable "+c.Pool+"/"+noLock+" exclusive-lock") {
		t.Fatalf("an image without exclusive-lock, through gw-b: %d %s", status, body)
	}
	if v := stored(); v != string(gateway.EncodeVersion(2)) {
		t.Fatalf("a refused change was stored: version %q", v)
	}
	a.waitGroup(2, []uint32{1, 2})
	b.waitGroup(2, []uint32{1, 2})

	// Two changes at once on the same base.
	var wg sync.WaitGroup
	var codes [2]int
	var bodies [2]string
	for i, p := range []*gwProc{a, b} {
		nsid, img := 3+i, []string{img3, img4}[i]
		wg.Go(func() {
			codes[i], bodies[i] = p.post(path+"?group_version=2", fmt.Sprintf(`{"nsid": %d, "ana_group": 1, "backend": %s}`, nsid, rbdBackend(img)))
		})
	}
	wg.Wait()
	won := slices.Index(codes[:], 200)
	lost := 1 - won
	if won < 0 || codes[lost] != 409 || !strings.Contains(bodies[lost], `"group_version": 3`) || !strings.Contains(bodies[won], `"group_version": 3`) {
		t.Fatalf("two changes on version 2 at once: %v %q", codes, bodies)
	}
	t.Logf("the lost change: %d %s", codes[lost], bodies[lost])
	want := []uint32{1, 2, uint32(3 + won)}
	a.waitGroup(3, want)
	b.waitGroup(3, want)

	// nvmetctl group: the stored version and each gateway's.
	ctl := buildCtl(t)
	deadline = time.Now().Add(hang)
	for {
		out, err := exec.Command(ctl, "--socket", filepath.Join(b.dir, "ctl.sock"), "group").CombinedOutput()
		if err != nil {
			t.Fatalf("nvmetctl group: %v\n%s", err, out)
		}
		if regexp.MustCompile(`(?s)version 3 .*gw-a +3 +current +1\n.*gw-b +3 +current +-\n.*ANA GROUP +PREFERRED +HOLDER\n1 +gw-a +gw-a\n.*health: ok\n`).Match(out) {
			t.Logf("nvmetctl group:\n%s", out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmetctl group:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A SIGHUP re-reads the file's own parts and keeps the group's
	// configuration (the file still has namespace 1 only).
	from := len(b.stderr.String())
	b.signal(syscall.SIGHUP)
	b.waitLog(`configuration reloaded`, from)
	b.waitGroup(3, want)
	if m := b.get("metrics.sock", "/metrics"); !strings.Contains(m, `nvmetd_gateway_group_config_version{group="`+a.group+`"} 3`+"\n") ||
		!strings.Contains(m, `nvmetd_gateway_group_config_pending{group="`+a.group+`"} 0`+"\n") {
		t.Fatalf("gw-b's metrics:\n%s", grepLines(m, "group_config"))
	}

	// nvmetctl --group, through gw-b: namespace 2 removed for the group
	// (based on the stored version), version 4 on both.
	out, err := exec.Command(ctl, "--socket", filepath.Join(b.dir, "ctl.sock"), "--group", "namespace", "remove", gwSubNQN, "2").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gateway group configuration: version 4") {
		t.Fatalf("nvmetctl --group namespace remove: %v\n%s", err, out)
	}
	want = slices.DeleteFunc(want, func(n uint32) bool { return n == 2 })
	a.waitGroup(4, want)
	b.waitGroup(4, want)

	// Both restarted: the stored version is served, not their files'.
	for _, p := range []*gwProc{b, a} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	a.start()
	b.start()
	a.waitGroup(4, want)
	b.waitGroup(4, want)
	a.waitLog(`subsystems and hosts differ from the group's configuration`, 0)
	if v := stored(); v != string(gateway.EncodeVersion(4)) {
		t.Fatalf("stored version after the restarts: %q", v)
	}

	// A version one gateway cannot apply: namespace 6's keyring is
	// removed while gw-b is stopped (after gw-a opened the image with
	// it), so gw-b's reload is refused: it keeps version 4, says why, is
	// shown behind, refuses changes made through it, and applies version
	// 5 at its next retry once the keyring is back.
	keyring := filepath.Join(t.TempDir(), "keyring")
	kb, err := os.ReadFile(c.Keyring)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyring, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	b.signal(syscall.SIGSTOP)
	b.waitStopped()
	status, body = a.post(path, fmt.Sprintf(`{"nsid": 6, "ana_group": 1, "backend": {"kind": "rbd", "pool": %q, "image": %q, "ceph_conf": %q, "client_id": %q, "keyring": %q}}`,
		c.Pool, img6, c.Conf, c.ClientID, keyring))
	if status != 200 || !strings.Contains(body, `"group_version": 5`) {
		b.signal(syscall.SIGCONT)
		t.Fatalf("add namespace 6 through gw-a: %d %s", status, body)
	}
	if err := os.Remove(keyring); err != nil {
		t.Fatal(err)
	}
	b.signal(syscall.SIGCONT)
	deadline = time.Now().Add(hang)
	for {
		var st struct {
			Gateway struct {
				Version uint64 `json:"group_config_version"`
				Pending string `json:"group_config_pending"`
			} `json:"gateway"`
		}
		if err := json.Unmarshal([]byte(b.get("ctl.sock", "/v1/status")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Gateway.Version == 4 && strings.HasPrefix(st.Gateway.Pending, "version 5: ") {
			t.Logf("gw-b: %s", st.Gateway.Pending)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-b's status: %+v", st.Gateway)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err = exec.Command(ctl, "--socket", filepath.Join(a.dir, "ctl.sock"), "group").CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?s)version 5 .*gw-a +5 +current +\S+\n.*gw-b +4 +behind +-\n.*health: attention\n.*gw-b runs version 4 of 5\n`).Match(out) {
		t.Fatalf("nvmetctl group with gw-b behind: %v\n%s", err, out)
	}
	// The image of the change that lost the race above is unused: the
	// change is valid, and refused only because gw-b is behind.
	status, body = b.post(path+"?group_version=5", `{"nsid": 7, "ana_group": 1, "backend": `+rbdBackend([]string{img3, img4}[lost])+`}`)
	if status != 503 || !strings.Contains(body, "gw-b runs version 4 of the group configuration, not the stored 5") {
		t.Fatalf("a change through the gateway behind: %d %s", status, body)
	}
	if err := os.WriteFile(keyring, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	want = append(want, 6)
	b.waitGroup(5, want)
	a.waitGroup(5, want)
}
