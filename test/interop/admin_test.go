package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/target"
)

// The admin-command interop test connects the guest's kernel host (nvme
// connect -t rdma) and our nvmeof connect to the same nvmetd target, in
// this process, and compares what the guest's nvme-cli prints for its
// controller with what nvmeof prints for ours: nvme-cli's query commands
// (id-ctrl, id-ns, smart-log, error-log, fw-log, effects-log, ana-log,
// get-feature), in JSON (compared value by value) and in the normal
// format (with -H where nvme-cli decodes fields).
//
// Fields that legitimately differ between the two controllers, and only
// those, are left out of the comparison:
//   - id-ctrl cntlid: each association has its own controller ID;
//   - smart-log power_on_hours and controller_busy_time (JSON and normal):
//     clocks that may tick between the two reads;
//   - get-feature 0x0b (Asynchronous Event Configuration): each host
//     enables the events it handles (the kernel's nvme_enable_aen, our
//     initiator's), so only the line's layout is compared.
//
// effects-log runs with -c 0 on both sides: without a command set nvme-cli
// 2.3 reads CAP.CSS from the PCI BAR, which a fabrics controller does not
// have, and prints nothing.

// jsonDiff compares two JSON documents value by value (numbers as
// numbers: json-c prints nvme-cli's 128-bit counters as doubles), leaving
// out the keys in skip; it returns one line per difference.
func jsonDiff(ours, theirs string, skip map[string]bool) ([]string, error) {
	var a, b any
	if err := json.Unmarshal([]byte(ours), &a); err != nil {
		return nil, fmt.Errorf("ours: %w", err)
	}
	if err := json.Unmarshal([]byte(theirs), &b); err != nil {
		return nil, fmt.Errorf("theirs: %w", err)
	}
	var diffs []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		switch xv := x.(type) {
		case map[string]any:
			yv, ok := y.(map[string]any)
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s: ours an object, theirs %v", path, y))
				return
			}
			keys := map[string]bool{}
			for k := range xv {
				keys[k] = true
			}
			for k := range yv {
				keys[k] = true
			}
			var ks []string
			for k := range keys {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				if skip[k] {
					continue
				}
				xe, xok := xv[k]
				ye, yok := yv[k]
				switch {
				case !xok:
					diffs = append(diffs, fmt.Sprintf("%s.%s: missing in ours (theirs %v)", path, k, ye))
				case !yok:
					diffs = append(diffs, fmt.Sprintf("%s.%s: not in nvme-cli's (ours %v)", path, k, xe))
				default:
					walk(path+"."+k, xe, ye)
				}
			}
		case []any:
			yv, ok := y.([]any)
			if !ok || len(xv) != len(yv) {
				diffs = append(diffs, fmt.Sprintf("%s: ours %v, theirs %v", path, x, y))
				return
			}
			for i := range xv {
				walk(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i])
			}
		default:
			if !reflect.DeepEqual(x, y) {
				diffs = append(diffs, fmt.Sprintf("%s: ours %v, theirs %v", path, x, y))
			}
		}
	}
	walk("", a, b)
	return diffs, nil
}

// dropKeys removes the lines of the keys in skip from a JSON text.
func dropKeys(s string, skip map[string]bool) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		k := strings.TrimSpace(l)
		if i := strings.Index(k, `":`); strings.HasPrefix(k, `"`) && i > 0 && skip[k[1:i]] {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func testAdminCommandsAgainstNvmeCLI(t *testing.T, k kernel) {
	vm := startHealthyVM(t, k)
	port := freeTCPPort(t)
	dir := t.TempDir()
	cfg := &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: port, Subsystems: []string{interopNQN}}},
		Subsystems: []target.SubsystemConfig{{
			NQN: interopNQN, AllowAnyHost: true, Model: "nvmetd interop admin",
			Namespaces: []target.NamespaceConfig{
				{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns1.img"), Size: "64MiB"}},
				{NSID: 2, Backend: target.BackendConfig{Kind: "memory", Size: "32MiB"}},
			},
		}},
	}
	tgt, err := target.New(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tgt.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	}()
	defer vm.Exec(context.Background(), "nvme disconnect -n "+interopNQN+" >/dev/null 2>&1; true")
	step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 1", vm.HostAddr(), port, interopNQN))
	ctrl := waitController(t, vm)
	nsDevice(t, vm, 1)
	nsDevice(t, vm, 2)

	h := &hostCLI{t: t, bin: buildNvmeof(t), state: t.TempDir()}
	h.must("connect", "-t", "rdma", "-a", "127.0.0.1", "-s", strconv.Itoa(port), "-n", interopNQN, "-q", initHostNQN, "-i", "1")
	defer h.run("disconnect-all", "--force")
	// Quiet: the guest's udev has read the new disks before we compare
	// counters.
	step(t, vm, time.Minute, "udevadm settle -t 30 || true")

	// One guest round trip for every nvme-cli command (TCG is slow): the
	// outputs are separated by a marker line.
	type cmp struct {
		name   string
		guest  string // nvme-cli arguments after the device
		host   []string
		json   bool
		skip   map[string]bool
		normal bool // compare the normal output too
		mask   func(string) string
	}
	maskCNTLID := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "cntlid    :") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	// maskLines drops the lines that start with one of prefixes.
	maskLines := func(prefixes ...string) func(string) string {
		return func(s string) string {
			var out []string
			for _, l := range strings.Split(s, "\n") {
				if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(l, p) }) {
					out = append(out, l)
				}
			}
			return strings.Join(out, "\n")
		}
	}
	maskSMART := maskLines("power_on_hours", "controller_busy_time")
	maskValue := func(s string) string {
		if i := strings.Index(s, "value:"); i >= 0 {
			return s[:i+len("value:")]
		}
		return s
	}
	cmps := []cmp{
		{name: "id-ctrl json", guest: "id-ctrl /dev/" + ctrl + " -o json", host: []string{"id-ctrl", "-d", "nvme0", "-o", "json"}, json: true, skip: map[string]bool{"cntlid": true}},
		{name: "id-ctrl", guest: "id-ctrl /dev/" + ctrl, host: []string{"id-ctrl", "-d", "nvme0"}, normal: true, mask: maskCNTLID},
		{name: "id-ctrl -H", guest: "id-ctrl /dev/" + ctrl + " -H", host: []string{"id-ctrl", "-d", "nvme0", "-H"}, normal: true, mask: maskCNTLID},
		{name: "id-ns 1 json", guest: "id-ns /dev/" + ctrl + " -n 1 -o json", host: []string{"id-ns", "-d", "nvme0", "-n", "1", "-o", "json"}, json: true},
		{name: "id-ns 2 json", guest: "id-ns /dev/" + ctrl + " -n 2 -o json", host: []string{"id-ns", "-d", "nvme0", "-n", "2", "-o", "json"}, json: true},
		{name: "id-ns 1", guest: "id-ns /dev/" + ctrl + " -n 1", host: []string{"id-ns", "-d", "nvme0", "-n", "1"}, normal: true},
		{name: "id-ns 2 -H", guest: "id-ns /dev/" + ctrl + " -n 2 -H", host: []string{"id-ns", "-d", "nvme0", "-n", "2", "-H"}, normal: true},
		{name: "smart-log json", guest: "smart-log /dev/" + ctrl + " -o json", host: []string{"smart-log", "-d", "nvme0", "-o", "json"}, json: true,
			skip: map[string]bool{"power_on_hours": true, "controller_busy_time": true}},
		{name: "smart-log", guest: "smart-log /dev/" + ctrl, host: []string{"smart-log", "-d", "nvme0"}, normal: true, mask: maskSMART},
		{name: "smart-log -H", guest: "smart-log /dev/" + ctrl + " -H", host: []string{"smart-log", "-d", "nvme0", "-H"}, normal: true, mask: maskSMART},
		{name: "error-log json", guest: "error-log /dev/" + ctrl + " -o json", host: []string{"error-log", "-d", "nvme0", "-o", "json"}, json: true},
		{name: "error-log", guest: "error-log /dev/" + ctrl, host: []string{"error-log", "-d", "nvme0"}, normal: true},
		{name: "fw-log json", guest: "fw-log /dev/" + ctrl + " -o json", host: []string{"fw-log", "-d", "nvme0", "-o", "json"}, json: true},
		{name: "fw-log", guest: "fw-log /dev/" + ctrl, host: []string{"fw-log", "-d", "nvme0"}, normal: true},
		{name: "effects-log json", guest: "effects-log /dev/" + ctrl + " -c 0 -o json", host: []string{"effects-log", "-d", "nvme0", "-c", "0", "-o", "json"}, json: true},
		{name: "effects-log", guest: "effects-log /dev/" + ctrl + " -c 0", host: []string{"effects-log", "-d", "nvme0", "-c", "0"}, normal: true},
		{name: "effects-log -H", guest: "effects-log /dev/" + ctrl + " -c 0 -H", host: []string{"effects-log", "-d", "nvme0", "-c", "0", "-H"}, normal: true},
		{name: "ana-log json", guest: "ana-log /dev/" + ctrl + " -o json", host: []string{"ana-log", "-d", "nvme0", "-o", "json"}, json: true},
		{name: "ana-log", guest: "ana-log /dev/" + ctrl, host: []string{"ana-log", "-d", "nvme0"}, normal: true},
		{name: "get-feature 6", guest: "get-feature /dev/" + ctrl + " -f 6", host: []string{"get-feature", "-d", "nvme0", "-f", "6"}, normal: true},
		{name: "get-feature 7", guest: "get-feature /dev/" + ctrl + " -f 7 -H", host: []string{"get-feature", "-d", "nvme0", "-f", "7", "-H"}, normal: true},
		{name: "get-feature 0xb", guest: "get-feature /dev/" + ctrl + " -f 0xb", host: []string{"get-feature", "-d", "nvme0", "-f", "0xb"}, normal: true, mask: maskValue},
		{name: "get-feature 0xf", guest: "get-feature /dev/" + ctrl + " -f 0xf", host: []string{"get-feature", "-d", "nvme0", "-f", "0xf"}, normal: true},
		{name: "get-feature 6 -H", guest: "get-feature /dev/" + ctrl + " -f 6 -H", host: []string{"get-feature", "-d", "nvme0", "-f", "6", "-H"}, normal: true},
		{name: "get-feature 0xf -H", guest: "get-feature /dev/" + ctrl + " -f 0xf -H", host: []string{"get-feature", "-d", "nvme0", "-f", "0xf", "-H"}, normal: true},
		{name: "get-feature 6 -s 3", guest: "get-feature /dev/" + ctrl + " -f 6 -s 3", host: []string{"get-feature", "-d", "nvme0", "-f", "6", "-s", "3"}, normal: true},
	}
	// Our controller is nvme0 (the test's own runtime directory); fw-log,
	// ana-log and smart-log print the device's name, so ours is renamed to
	// the guest's in the comparison.
	const sep = "----nvmetd-admin-interop----"
	var script []string
	for _, c := range cmps {
		script = append(script, "nvme "+c.guest+" 2>&1; echo "+sep)
	}
	all := step(t, vm, 2*time.Minute, strings.Join(script, "; "))
	theirs := strings.Split(all, sep+"\n")
	if len(theirs) < len(cmps) {
		t.Fatalf("guest printed %d outputs for %d commands", len(theirs), len(cmps))
	}
	for i, c := range cmps {
		ours := h.must(c.host...)
		if ctrl != "nvme0" {
			ours = strings.ReplaceAll(ours, "nvme0", ctrl)
		}
		if c.json {
			diffs, err := jsonDiff(ours, theirs[i], c.skip)
			if err != nil {
				t.Errorf("%s: %v\nours:\n%s\ntheirs:\n%s", c.name, err, ours, theirs[i])
				continue
			}
			if len(diffs) > 0 {
				t.Errorf("%s differs from nvme-cli's:\n  %s", c.name, strings.Join(diffs, "\n  "))
				continue
			}
			// Same values: the text must be the same too (field order,
			// json-c's layout), but for the lines of the skipped keys.
			if o, th := dropKeys(ours, c.skip), dropKeys(theirs[i], c.skip); o != th {
				t.Errorf("%s: same values as nvme-cli's, other text:\nours:\n%s\ntheirs:\n%s", c.name, o, th)
			}
			continue
		}
		o, th := ours, theirs[i]
		if c.mask != nil {
			o, th = c.mask(o), c.mask(th)
		}
		if o != th {
			t.Errorf("%s differs from nvme-cli's:\nours:\n%s\ntheirs:\n%s", c.name, o, th)
		}
	}
}
