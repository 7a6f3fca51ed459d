package interop_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// testLinuxHostGatewayGroupConfig: the group's configuration held in
// RADOS (gateway.group_config: rados, issue 27) seen by the stock Linux
// host. Two nvmetd-rbd gateways of one group (gw-a seeds version 1 from
// its file: namespace 1 in ANA group 1, preferred owner gw-a); the host
// is connected to both (native multipath). A namespace added ONCE,
// through gw-a's management API (version 2), appears on the host on both
// paths without the test asking for a rescan (each gateway's Namespace
// Attribute Changed notice makes the kernel rescan), optimized through
// gw-a and inaccessible through gw-b, in the controllers' ANA logs (nvme
// ana-log), in the kernel's paths and as one multipath disk. A change
// that would break an invariant (namespace 2's image again as namespace
// 3) is refused (400) through either gateway and changes nothing the
// host sees. The verified workload (vwriter) runs on the new namespace
// while gw-b and then gw-a are restarted (SIGTERM, one at a time; their
// files still hold namespace 1 only): both come back with version 2, the
// host keeps the namespace on both paths (gw-a optimized again after its
// failback), and the sweep of the whole disk finds 0 regressed blocks, 0
// I/O errors.
func testLinuxHostGatewayGroupConfig(t *testing.T, k kernel) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	image2 := c.CreateImage(t, 64<<20)
	bin := buildGatewayBinary(t)
	vm := startHealthyVM(t, k)
	addr := vm.HostAddr()
	procs := startGatewayPair(t, c, image, bin, "c", func(p *gwProc) { p.groupConfig = "rados" })
	a, b := procs[0], procs[1]
	for _, p := range procs {
		waitGroupVersion(t, p, 1, []uint32{1})
	}
	defer stopWorkersAndDisconnect(vm, gatewayNQN, "gc")
	mark0 := kmsgMark(t, vm)
	ctrlOf := connectPaths(t, vm, gatewayNQN, addr, []int{a.port, b.port})
	ca, cb := ctrlOf[a.port], ctrlOf[b.port]
	waitPathState(t, vm, ca, 1, "optimized")
	waitPathState(t, vm, cb, 1, "inaccessible")
	hostView(t, vm, ca, cb, []string{"1"}, "before the change")

	// Added once, through gw-a: version 2 on both gateways.
	backend := fmt.Sprintf(`{"kind": "rbd", "pool": %q, "image": %q, "ceph_conf": %q, "client_id": %q, "keyring": %q}`,
		c.Pool, image2, c.Conf, c.ClientID, c.Keyring)
	nsPath := "/v1/subsystems/" + gatewayNQN + "/namespaces"
	status, body := gwPost(t, a, nsPath, `{"nsid": 2, "ana_group": 1, "backend": `+backend+`}`)
	if status != http.StatusOK || !strings.Contains(body, `"group_version": 2`) {
		t.Fatalf("add namespace 2 through gw-a: %d %s", status, body)
	}
	t.Logf("namespace 2 added through gw-a: %s", compactJSON(body))
	for _, p := range procs {
		waitGroupVersion(t, p, 2, []uint32{1, 2})
	}
	// The kernel rescans on each controller's notice: namespace 2's path
	// appears on both with its group's state (no rescan asked).
	waitPathState(t, vm, ca, 2, "optimized")
	waitPathState(t, vm, cb, 2, "inaccessible")
	hostView(t, vm, ca, cb, []string{"1", "2"}, "after namespace 2 was added through gw-a")
	dev := strings.TrimSpace(step(t, vm, time.Minute, fmt.Sprintf(
		`for i in $(seq 1 100); do for b in /sys/block/nvme*n*; do case ${b##*/} in *c*) continue;; esac; `+
			`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = 2 ] && [ -b /dev/$(basename $b) ] && [ "$(cat $b/size)" -gt 0 ] && basename $b && exit 0; done; sleep 0.1; done; exit 1`, gatewayNQN)))
	step(t, vm, time.Minute, "nvme list-subsys /dev/"+dev)

	// A change that would break an invariant, refused through both.
	for _, p := range procs {
		status, body := gwPost(t, p, nsPath, `{"nsid": 3, "ana_group": 1, "backend": `+backend+`}`)
		if status != http.StatusBadRequest || !strings.Contains(body, "an image can be one namespace only") {
			t.Fatalf("namespace 2's image again as namespace 3, through %s: %d %s", p.name, status, body)
		}
		t.Logf("namespace 2's image again, through %s: %d %s", p.name, status, compactJSON(body))
	}
	for _, p := range procs {
		waitGroupVersion(t, p, 2, []uint32{1, 2})
	}
	hostView(t, vm, ca, cb, []string{"1", "2"}, "after the refused change")

	// The verified workload on namespace 2 while each gateway restarts.
	vw := startLinuxWriter(t, vm, dev, "gc")
	vw.waitWrites(200, "before the restarts")
	events := map[string]time.Time{}
	ctrlLive := func(ctrl string) {
		t.Helper()
		step(t, vm, 3*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/state); [ "$s" = live ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`, ctrl))
	}
	// gw-b, the standby: its path comes back inaccessible.
	events["restart gw-b"] = time.Now()
	b.stop(syscall.SIGTERM)
	b.start()
	waitGroupVersion(t, b, 2, []uint32{1, 2})
	ctrlLive(cb)
	waitPathState(t, vm, cb, 2, "inaccessible")
	vw.waitWrites(200, "after the restart of gw-b")
	// gw-a, the owner: its clean stop releases group 1 to gw-b (the I/O
	// moves there); restarted, the preferred owner takes the group back
	// (failback): its path optimized again, gw-b's inaccessible. The
	// kernel's path states are only read after gw-a's log says it serves
	// the group again (before, the path of gw-a still shows the state it
	// had before the stop).
	events["restart gw-a"] = time.Now()
	mark := a.logSize()
	a.stop(syscall.SIGTERM)
	a.start()
	waitGroupVersion(t, a, 2, []uint32{1, 2})
	a.waitLogFrom(`group 1: set-ana optimized`, mark)
	ctrlLive(ca)
	waitPathState(t, vm, ca, 2, "optimized")
	waitPathState(t, vm, cb, 2, "inaccessible")
	vw.waitWrites(200, "after the restart of gw-a")
	hostView(t, vm, ca, cb, []string{"1", "2"}, "after both gateways restarted")
	sum, off := vw.stop()
	checkLinuxSweep(t, sum, dmesgSince(t, vm, mark0))
	logLinuxStalls(t, sum, off, events, 0, "")
}

// waitGroupVersion waits (2 minutes at most) until gateway p runs version
// v of the group's configuration and its management API lists the
// namespaces nsids of the gateway subsystem.
func waitGroupVersion(t *testing.T, p *gwProc, v uint64, nsids []uint32) {
	t.Helper()
	want := fmt.Sprint(nsids)
	var got string
	var gv uint64
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var st struct {
			Gateway struct {
				Version uint64 `json:"group_config_version"`
			} `json:"gateway"`
		}
		if err := json.Unmarshal([]byte(gwGet(t, p, "/v1/status")), &st); err != nil {
			t.Fatalf("%s status: %v", p.name, err)
		}
		var ns []struct {
			NSID uint32 `json:"nsid"`
		}
		if err := json.Unmarshal([]byte(gwGet(t, p, "/v1/subsystems/"+gatewayNQN+"/namespaces")), &ns); err != nil {
			t.Fatalf("%s namespaces: %v", p.name, err)
		}
		ids := []uint32{}
		for _, n := range ns {
			ids = append(ids, n.NSID)
		}
		gv, got = st.Gateway.Version, fmt.Sprint(ids)
		if gv == v && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s runs version %d with namespaces %s, want version %d with %s", p.name, gv, got, v, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPathState waits (2 minutes at most) until the kernel's path of
// controller ctrl to namespace nsid exists with ANA state want, without
// asking for a rescan.
func waitPathState(t *testing.T, vm *lab.VM, ctrl string, nsid int, want string) {
	t.Helper()
	step(t, vm, 3*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=none; for p in /sys/class/nvme/%s/nvme*c*n*; do `+
		`[ -e $p/nsid ] && [ "$(cat $p/nsid)" = %d ] && s=$(cat $p/ana_state 2>/dev/null); done; [ "$s" = %s ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`,
		ctrl, nsid, want))
}

// testLinuxHostGatewayDiscoveryNotice: the Discovery Log Change notice of
// the gateway group (issue 27) reaching the stock Linux host. The host
// keeps a persistent discovery controller to gw-a (nvme discover
// --persistent); gw-b stops cleanly (its ports withdrawn from the group)
// and starts again (recorded again). Each time gw-a's discovery log
// changes it sends Asynchronous Event 0xF0 (Notice, Discovery Log Page
// Change); the kernel hands it to user space as a change uevent on the
// discovery controller with NVME_AEN=0x70f002 (log page 0x70, info 0xf0,
// type notice: nvme_aen_uevent; nvme-cli's udev rule runs connect-all on
// it; the lab guest has no udev, and ueventmon, a test program, prints
// the kernel's uevents as udevadm monitor would); and the log read again through the
// persistent controller (nvme discover -d) lists gw-b's port, then not,
// then again.
func testLinuxHostGatewayDiscoveryNotice(t *testing.T, k kernel) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 16<<20)
	bin := buildGatewayBinary(t)
	vm := startHealthyVM(t, k)
	addr := vm.HostAddr()
	procs := startGatewayPair(t, c, image, bin, "n", func(p *gwProc) { p.advertise = addr })
	a, b := procs[0], procs[1]
	a.waitLog(`the discovery log lists the group's other ports.*gw-b`)
	defer vm.Exec(t.Context(), `kill $(cat /root/udevmon.pid) 2>/dev/null; for c in /sys/class/nvme/nvme*; do `+
		`[ "$(cat $c/subsysnqn 2>/dev/null)" = nqn.2014-08.org.nvmexpress.discovery ] && echo 1 > $c/delete_controller; done; nvme disconnect -n `+gatewayNQN+` >/dev/null 2>&1; true`)

	// The guest has no udev: ueventmon prints the kernel's uevents of
	// the nvme class as udevadm monitor --kernel --property would.
	mon := vm.BuildAndPut(t, "./internal/testing/uevent/cmd/ueventmon")
	step(t, vm, time.Minute, `rm -f /root/udev.log; `+mon+` -subsystem nvme > /root/udev.log 2>&1 & echo $! > /root/udevmon.pid; `+
		`for i in $(seq 1 300); do grep -q '^listening$' /root/udev.log && exit 0; sleep 0.1; done; cat /root/udev.log; exit 1`)
	out := step(t, vm, time.Minute, fmt.Sprintf("nvme discover --persistent -t rdma -a %s -s %d", addr, a.port))
	lists := func(out string, p *gwProc) bool {
		return regexp.MustCompile(fmt.Sprintf(`(?s)trsvcid:\s*%d\s.*subnqn:\s*%s`, p.port, regexp.QuoteMeta(gatewayNQN))).MatchString(out)
	}
	if !lists(out, b) {
		t.Fatalf("nvme discover through gw-a does not list gw-b's port %d:\n%s", b.port, out)
	}
	disc := strings.TrimSpace(step(t, vm, time.Minute, fmt.Sprintf(`for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn)" = nqn.2014-08.org.nvmexpress.discovery ] && `+
		`case "$(cat $c/address)" in *trsvcid=%d*) echo ${c##*/}; cat $c/state >&2; exit 0;; esac; done; exit 1`, a.port)))

	// aens waits until the guest's udev log holds n change uevents of
	// the discovery controller with the Discovery Log Page Change notice,
	// and returns the log.
	aens := func(n int, what string) string {
		t.Helper()
		// ueventmon prints nvme-class events only, and the persistent
		// discovery controller is the only discovery controller.
		out := step(t, vm, 3*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do m=$(grep -c '^NVME_AEN=0x70f002$' /root/udev.log); `+
			`[ "$m" -ge %[1]d ] && { echo "$m notices"; cat /root/udev.log; exit 0; }; sleep 0.1; done; echo "$m notices (%[2]s)"; cat /root/udev.log; exit 1`, n, what))
		if !regexp.MustCompile(`(?m)^change@\S+/` + disc + `$`).MatchString(out) {
			t.Fatalf("no change uevent of the discovery controller %s:\n%s", disc, out)
		}
		return out
	}
	reread := func() string {
		t.Helper()
		return step(t, vm, time.Minute, "nvme discover -d "+disc)
	}

	// gw-b stops cleanly: its ports leave gw-a's log.
	mark := a.logSize()
	b.stop(syscall.SIGTERM)
	a.waitLogFrom(`the discovery log lists the group's other ports.*"ports": 0`, mark)
	aens(1, "after gw-b's clean stop")
	if out := reread(); lists(out, b) {
		t.Fatalf("the log read again through the persistent controller still lists gw-b's port %d after its clean stop:\n%s", b.port, out)
	}

	// gw-b starts again: its ports are back in gw-a's log.
	mark = a.logSize()
	b.start()
	a.waitLogFrom(`the discovery log lists the group's other ports.*gw-b`, mark)
	aens(2, "after gw-b's start")
	if out := reread(); !lists(out, b) {
		t.Fatalf("the log read again through the persistent controller does not list gw-b's port %d after its start:\n%s", b.port, out)
	}
	step(t, vm, time.Minute, "cat /sys/class/nvme/"+disc+"/state; dmesg | grep -i 'nvme' | tail -n 20")
}
