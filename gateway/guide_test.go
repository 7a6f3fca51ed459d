//go:build rbd

package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// guideStep is one command block of docs/rbd.md's "Operating the gateway
// group, step by step": the block after a `<!-- guide-step: ROLE NAME -->`
// marker.
type guideStep struct {
	role, name, script string
}

// guideSteps extracts the guide's marked command blocks, in order.
func guideSteps(t *testing.T) []guideStep {
	t.Helper()
	b, err := os.ReadFile("../docs/rbd.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "### Operating the gateway group, step by step\n")
	if start < 0 {
		t.Fatal(`docs/rbd.md has no section "Operating the gateway group, step by step"`)
	}
	sec := doc[start+1:]
	if end := strings.Index(sec, "\n### "); end >= 0 {
		sec = sec[:end]
	}
	var steps []guideStep
	rx := regexp.MustCompile("(?ms)^<!-- guide-step: (\\S+) (\\S+) -->\n```sh\n(.*?)\n```\n")
	for _, m := range rx.FindAllStringSubmatch(sec, -1) {
		steps = append(steps, guideStep{role: m[1], name: m[2], script: m[3]})
	}
	if n := len(regexp.MustCompile("(?m)^<!-- guide-step:").FindAllString(sec, -1)); n != len(steps) {
		t.Fatalf("docs/rbd.md: %d guide-step markers, %d of them followed by a ```sh block", n, len(steps))
	}
	return steps
}

// guideSystemctl is the systemctl the guide's steps find in their PATH:
// it starts and stops this gateway's nvmetd ($GUIDE_DIR) as
// deploy/nvmetd.service does (its StateDirectory and RuntimeDirectory, the
// configuration file /etc/nvmetd/nvmetd.yaml, here $GUIDE_DIR/nvmetd.yaml),
// a start returning once the daemon says it is ready (Type=notify), a stop
// once it exited (SIGTERM, then SIGKILL after 90 s as TimeoutStopSec).
const guideSystemctl = `#!/bin/bash
set -u
d=$GUIDE_DIR
start() {
  off=$(stat -c %s "$d/nvmetd.log" 2>/dev/null || echo 0)
  STATE_DIRECTORY=$d RUNTIME_DIRECTORY=$d setsid nvmetd --config "$d/nvmetd.yaml" >> "$d/nvmetd.log" 2>&1 < /dev/null &
  echo $! > "$d/pid"
  for i in $(seq 1 1200); do
    tail -c +$((off+1)) "$d/nvmetd.log" | grep -q 'nvmetd ready' && return 0
    kill -0 "$(cat "$d/pid")" 2>/dev/null || { echo "nvmetd exited:" >&2; tail -n 30 "$d/nvmetd.log" >&2; rm -f "$d/pid"; return 1; }
    sleep 0.1
  done
  echo "nvmetd not ready after 120 s" >&2; return 1
}
stop() {
  [ -s "$d/pid" ] || return 0
  p=$(cat "$d/pid"); kill -TERM "$p" 2>/dev/null
  for i in $(seq 1 900); do kill -0 "$p" 2>/dev/null || { rm -f "$d/pid"; return 0; }; sleep 0.1; done
  kill -KILL "$p"; rm -f "$d/pid"; return 1
}
now=no; args=()
for a in "$@"; do if [ "$a" = --now ]; then now=yes; else args+=("$a"); fi; done
[ "${args[1]:-}" = nvmetd ] || { echo "systemctl (test): only the nvmetd unit: $*" >&2; exit 2; }
case ${args[0]} in
  start) start;;
  enable) [ $now = yes ] && start; true;;
  stop) stop;;
  disable) [ $now = yes ] && stop; true;;
  restart) stop && start;;
  *) echo "systemctl (test): ${args[0]}?" >&2; exit 2;;
esac
`

// TestGuideGatewayGroup runs docs/rbd.md's "Operating the gateway group,
// step by step" as written (issue 27): every marked command block in
// order, as its role (admin: the Ceph tools as client.admin; gw-a, gw-b:
// on that gateway, nvmetctl finding its daemon's control socket), with
// only the example's names replaced by the test's (pool, groups, images,
// addresses and ports, the Ceph files, /etc/nvmetd: a directory per
// gateway) and systemctl a shim that starts and stops the real
// nvmetd-rbd process. After each step its visible effect is checked
// (nvmetctl group, the stored version, the namespaces each gateway
// lists). Step 7's file-configured group (gwgroup2) is set up by the test
// (two gateways whose files agree) before its steps run.
func TestGuideGatewayGroup(t *testing.T) {
	steps := guideSteps(t)
	c := cephtest.Shared(t)
	if c.ClientID != "nvmetd" {
		t.Fatalf("the guide's cephx user is client.nvmetd; the test cluster's is client.%s", c.ClientID)
	}
	var rb [4]byte
	rand.Read(rb[:])
	sfx := hex.EncodeToString(rb[:])
	images := map[string]string{"vol1": "guide-" + sfx + "-vol1", "vol2": "guide-" + sfx + "-vol2", "vol3": "guide-" + sfx + "-vol3"}
	groups := map[string]string{"gwgroup1": "guide1" + sfx, "gwgroup2": "guide2" + sfx}
	// The images, removed after the processes stop (cleanups run last
	// first).
	t.Cleanup(func() {
		for _, img := range images {
			_, _ = c.RBD("rm", "--no-progress", c.Pool+"/"+img)
		}
	})

	bin := buildGateway(t)
	binDir := t.TempDir()
	ctl := filepath.Join(binDir, "nvmetctl")
	if out, err := exec.Command("go", "build", "-o", ctl, "../cmd/nvmetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build nvmetctl: %v\n%s", err, out)
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "nvmetd")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binDir, "systemctl"), []byte(guideSystemctl), 0o755); err != nil {
		t.Fatal(err)
	}

	// Each gateway's directory (its /etc/nvmetd, state and runtime
	// directories) and port; step 7 runs on a second pair.
	type gw struct {
		dir  string
		port int
	}
	root := t.TempDir()
	gws := map[string]*gw{}
	for _, n := range []string{"gw-a", "gw-b", "gw-a2", "gw-b2"} {
		gws[n] = &gw{dir: filepath.Join(root, n), port: freePort(t)}
		if err := os.MkdirAll(gws[n].dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for n, g := range gws {
			b, err := os.ReadFile(filepath.Join(g.dir, "pid"))
			if err != nil {
				continue
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				for i := 0; i < 600 && syscall.Kill(pid, 0) == nil; i++ {
					time.Sleep(100 * time.Millisecond)
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if t.Failed() {
				lb, _ := os.ReadFile(filepath.Join(g.dir, "nvmetd.log"))
				if len(lb) > 4000 {
					lb = lb[len(lb)-4000:]
				}
				t.Logf("%s's log:\n%s", n, lb)
			}
		}
	})
	// gwOf is the gateway a step of role runs on.
	gwOf := func(role, step string) *gw {
		if step == "move" {
			return gws[role+"2"]
		}
		return gws[role]
	}
	// substitute replaces the example's names with the test's.
	substitute := func(s, role, step string) string {
		r := []string{"gwpool", c.Pool, "/etc/ceph/ceph.conf", c.Conf, "/etc/ceph/ceph.client.nvmetd.keyring", c.Keyring,
			"192.0.2.11", "127.0.0.1", "192.0.2.12", "127.0.0.1"}
		for k, v := range images {
			r = append(r, k, v)
		}
		for k, v := range groups {
			r = append(r, k, v)
		}
		if g := gwOf(role, step); g != nil {
			r = append(r, "/etc/nvmetd", g.dir, "4420", strconv.Itoa(g.port))
		}
		return strings.NewReplacer(r...).Replace(s)
	}
	run := func(s guideStep) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", substitute(s.script, s.role, s.name))
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "CEPH_CONF="+c.Conf,
			"CEPH_ARGS=--name client.admin --keyring "+c.AdminKeyring)
		if g := gwOf(s.role, s.name); g != nil {
			cmd.Env = append(cmd.Env, "GUIDE_DIR="+g.dir, "NVMETD_CONTROL_SOCKET="+filepath.Join(g.dir, "nvmetd.sock"))
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// on runs a command on a gateway (as the test, not the guide).
	on := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(ctl, append([]string{"--socket", filepath.Join(gws[name].dir, "nvmetd.sock")}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: nvmetctl %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// waitGroup waits until `nvmetctl group` on gateway name matches
	// every one of res.
	waitGroup := func(name string, res ...string) string {
		t.Helper()
		for deadline := time.Now().Add(hang); ; {
			out := on(name, "group")
			ok := true
			for _, re := range res {
				if !regexp.MustCompile(re).MatchString(out) {
					ok = false
				}
			}
			if ok {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("nvmetctl group on %s does not match %q:\n%s", name, res, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	stored := func(group string) string {
		out, err := exec.Command("rados", "--conf", c.Conf, "--name", "client.admin", "--keyring", c.AdminKeyring,
			"-p", c.Pool, "get", "nvmetd_gateway."+groups[group]+".config", "-").CombinedOutput()
		if err != nil {
			t.Fatalf("rados get: %v\n%s", err, out)
		}
		return string(out)
	}
	nsOf := func(name, nqn string) string { return on(name, "namespace", "list", nqn) }
	const vol = "nqn.2024-01.com.example:gw-vol"

	checks := map[string]func(out string){
		"admin images": func(out string) {
			if !strings.Contains(out, "exclusive-lock") {
				t.Fatalf("the images lack exclusive-lock:\n%s", out)
			}
		},
		"gw-a bootstrap": func(out string) {
			if !regexp.MustCompile(`(?m)^group \S+: version 1 `).MatchString(out) {
				t.Fatalf("nvmetctl group after the bootstrap:\n%s", out)
			}
			// gw-a records the version it runs just after it is ready.
			waitGroup("gw-a", `(?m)^gw-a +1 +current`, `(?m)^1 +gw-a +gw-a$`)
		},
		"admin version": func(out string) {
			if out != "00000000000000000001" {
				t.Fatalf("the stored version: %q", out)
			}
		},
		"gw-b join": func(out string) {
			if !regexp.MustCompile(`(?m)^1 +true +rbd `).MatchString(out) {
				t.Fatalf("gw-b does not list namespace 1:\n%s", out)
			}
		},
		"gw-b status": func(string) {
			waitGroup("gw-b", `(?m)^gw-a +1 +current`, `(?m)^gw-b +1 +current`, `(?m)^1 +gw-a +gw-a$`, `(?m)^2 +gw-b +gw-[ab]$`, `(?m)^health: ok$`)
		},
		"gw-b add-namespace": func(out string) {
			if !strings.Contains(out, "gateway group configuration: version 2") {
				t.Fatalf("nvmetctl --group namespace add:\n%s", out)
			}
			waitGroup("gw-a", `(?m)^gw-a +2 +current`, `(?m)^gw-b +2 +current`)
			for _, g := range []string{"gw-a", "gw-b"} {
				if ns := nsOf(g, vol); !regexp.MustCompile(`(?m)^2 +true +rbd .* 2$`).MatchString(ns) {
					t.Fatalf("%s does not list namespace 2:\n%s", g, ns)
				}
			}
		},
		"gw-a add-subsystem": func(out string) {
			waitGroup("gw-a", `(?m)^group \S+: version 4 `, `(?m)^gw-a +4 +current`, `(?m)^gw-b +4 +current`)
			for _, g := range []string{"gw-a", "gw-b"} {
				hosts := on(g, "host", "list", "nqn.2024-01.com.example:gw-db")
				if !strings.Contains(hosts, "0c4ddd4d-4a4c-4b3c-9a6e-2f1d3f0b7e11") || !strings.Contains(hosts, "5e2a3c8e-1b7d-4d2b-8f0e-6c9a4b1d2e33") {
					t.Fatalf("%s: the hosts gw-db allows:\n%s", g, hosts)
				}
				// Every port of every gateway serves every subsystem of
				// the group, the gateway the change was made through too.
				if ports := on(g, "port", "list"); !strings.Contains(ports, "nqn.2024-01.com.example:gw-db") {
					t.Fatalf("%s's port does not serve gw-db:\n%s", g, ports)
				}
				// Each gateway hands out its own CNTLIDs on both subsystems.
				subs := on(g, "-o", "json", "subsystem", "list")
				if n := len(regexp.MustCompile(`"cntlid_max": ?`+map[string]string{"gw-a": "1000", "gw-b": "2000"}[g]+`\b`).FindAllString(subs, -1)); n != 2 {
					t.Fatalf("%s: %d subsystems with its CNTLID range, want 2:\n%s", g, n, subs)
				}
			}
		},
		"gw-a refused": func(out string) {
			if !strings.Contains(out, "an image can be one namespace only") {
				t.Fatalf("the refused change:\n%s", out)
			}
			if v := stored("gwgroup1"); v != "00000000000000000004" {
				t.Fatalf("a refused change was stored: version %q", v)
			}
		},
		"gw-b restart": func(string) {
			waitGroup("gw-b", `(?m)^gw-a +4 +current`, `(?m)^gw-b +4 +current`, `(?m)^health: ok$`)
			if ns := nsOf("gw-b", vol); !regexp.MustCompile(`(?m)^2 +true +rbd .* 2$`).MatchString(ns) {
				t.Fatalf("gw-b after its restart:\n%s", ns)
			}
		},
		"gw-b decommission": func(string) {
			if _, err := os.Stat(filepath.Join(gws["gw-b"].dir, "pid")); err == nil {
				t.Fatal("gw-b still runs")
			}
		},
		"admin forget-gw-b": func(out string) {
			if !strings.Contains(out, "member.gw-b") {
				t.Fatalf("the config object's keys before:\n%s", out)
			}
		},
		"gw-a after-decommission": func(string) {
			out := waitGroup("gw-a", `(?m)^gw-a +4 +current`, `(?m)^1 +gw-a +gw-a$`, `(?m)^2 +gw-b +gw-a$`)
			if strings.Contains(out, "\ngw-b ") {
				t.Fatalf("gw-b still listed:\n%s", out)
			}
		},
		"gw-a move": func(string) {
			waitGroup("gw-a2", `(?m)^group \S+: version 1 `, `(?m)^gw-a +1 +current`)
		},
		"gw-b move": func(string) {
			waitGroup("gw-b2", `(?m)^gw-a +1 +current`, `(?m)^gw-b +1 +current`, `(?m)^health: ok$`)
			if ns := nsOf("gw-b2", vol); !regexp.MustCompile(`(?m)^1 +true +rbd `).MatchString(ns) {
				t.Fatalf("gw-b after the move:\n%s", ns)
			}
		},
	}
	if len(steps) != len(checks) {
		t.Fatalf("the guide has %d marked steps, the test checks %d", len(steps), len(checks))
	}
	for _, s := range steps {
		check := checks[s.role+" "+s.name]
		if check == nil {
			t.Fatalf("the guide's step %q (%s) has no check in the test", s.name, s.role)
		}
		if s.name == "move" && s.role == "gw-a" {
			startFileGroup(t, c, images["vol3"], groups["gwgroup2"], gws["gw-a2"].dir, gws["gw-b2"].dir, gws["gw-a2"].port, gws["gw-b2"].port, binDir)
		}
		out, err := run(s)
		t.Logf("step %s on %s:\n%s\n%s", s.name, s.role, substitute(s.script, s.role, s.name), out)
		if err != nil {
			t.Fatalf("step %s on %s failed: %v", s.name, s.role, err)
		}
		check(out)
	}
}

// startFileGroup starts step 7's starting point: gw-a and gw-b of a group
// whose configuration is in their files (group_config: file; the files
// agree: one subsystem, namespace 1 on image, ANA
// groups 1 and 2), through the same systemctl as the guide's steps.
func startFileGroup(t *testing.T, c *cephtest.Cluster, image, group, dirA, dirB string, portA, portB int, binDir string) {
	t.Helper()
	if _, err := c.RBD("create", "--size", "16M", c.Pool+"/"+image); err != nil {
		t.Fatalf("rbd create %s: %v", image, err)
	}
	for i, d := range []string{dirA, dirB} {
		name, port := []string{"gw-a", "gw-b"}[i], []int{portA, portB}[i]
		cfg := fmt.Sprintf(`gateway:
  name: %s
  group: %s
  cluster: {ceph_conf: %s, client_id: nvmetd, keyring: %s, pool: %s}
  group_config: file
  advertise: [{port_id: 1, address: 127.0.0.1}]
  ana_groups: [{id: 1, preferred: gw-a}, {id: 2, preferred: gw-b}]
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d}
subsystems:
  - nqn: nqn.2024-01.com.example:gw-vol
    allow_any_host: true
    cntlid_min: %d
    cntlid_max: %d
    namespaces:
      - nsid: 1
        ana_group: 1
        backend: {kind: rbd, pool: %s, image: %s, ceph_conf: %s, client_id: nvmetd, keyring: %s}
`, name, group, c.Conf, c.Keyring, c.Pool, port, 1+1000*i, 1000+1000*i, c.Pool, image, c.Conf, c.Keyring)
		if err := os.WriteFile(filepath.Join(d, "nvmetd.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("systemctl", "enable", "--now", "nvmetd")
		cmd.Path = filepath.Join(binDir, "systemctl")
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "GUIDE_DIR="+d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("start %s of the file-configured group: %v\n%s", name, err, out)
		}
	}
}
