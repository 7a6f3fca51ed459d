package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/target"
)

// TestGatewayExampleConfig checks configs/nvmetd-gateway.yaml: valid,
// without warnings, its gateway section with its defaults, every namespace
// in a gateway group, and the target's ANA states overlaid by ownership.
func TestGatewayExampleConfig(t *testing.T) {
	isolate(t)
	const example = "../../configs/nvmetd-gateway.yaml"
	lc, err := load(t, "--config", example)
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	if len(lc.Warnings) != 0 {
		t.Errorf("warnings: %q", lc.Warnings)
	}
	g := lc.Gateway
	if g == nil || g.Name != "gw-a" || g.Cluster.Pool != "rbd" || len(g.ANAGroups) != 2 || g.Lease.String() != "10s" {
		t.Fatalf("gateway section: %+v", g)
	}
	// Before the gateway takes a group, every gateway group is
	// inaccessible (gwtarget's tests cover ownership and the canonical
	// group configuration).
	cfg := gwtarget.New(g).Overlay(lc.Target.Clone())
	states := map[uint32]string{}
	for _, a := range cfg.Ports[0].ANAGroups {
		states[a.ID] = a.State
	}
	if states[1] != "inaccessible" || states[2] != "inaccessible" {
		t.Errorf("ANA states with no group owned: %v", states)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("overlaid configuration: %v", err)
	}
}

// TestNoGatewaySection: without the section nothing changes (no gateway,
// the file's ANA states as they are).
func TestNoGatewaySection(t *testing.T) {
	isolate(t)
	lc, err := load(t, "--config", "../../configs/nvmetd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if lc.Gateway != nil {
		t.Fatalf("gateway %+v", lc.Gateway)
	}
	var gs *gwtarget.Gateway
	c := lc.Target.Clone()
	if gs.Overlay(c) != c || gs.Status() != nil {
		t.Fatal("a nil gateway changes the configuration")
	}
}

// TestGatewayConfigErrors: each problem names its key.
func TestGatewayConfigErrors(t *testing.T) {
	base := `
subsystems:
  - nqn: nqn.2024-01.com.example:gw
    allow_any_host: true
    namespaces:
      - {nsid: 1, ana_group: 3, backend: {kind: memory, size: 1MiB}}
ports:
  - {id: 1, address: 127.0.0.1, service_id: 4420, subsystems: [nqn.2024-01.com.example:gw]}
`
	for _, c := range []struct{ gw, want string }{
		{"gateway: {cluster: {pool: rbd}, ana_groups: [{id: 3, preferred: a}]}", "gateway.name: required"},
		{"gateway: {name: a, ana_groups: [{id: 3, preferred: a}]}", "gateway.cluster.pool: required"},
		{"gateway: {name: a, cluster: {pool: rbd}, ana_groups: [{id: 3}]}", "gateway.ana_groups[0].preferred: required"},
		{"gateway: {name: a, cluster: {pool: rbd}, ana_groups: [{id: 3, preferred: a}, {id: 3, preferred: b}]}", "gateway.ana_groups[1].id: ANA group 3 is listed twice"},
		{"gateway: {name: a, cluster: {pool: rbd}, ana_groups: [{id: 2, preferred: a}]}", "namespace 1 is in ANA group 3, which no gateway group entry lists"},
		{"gateway: {name: a, cluster: {pool: rbd}, lease: 500ms, ana_groups: [{id: 3, preferred: a}]}", "gateway.lease: 500ms is out of range"},
		{"gateway: {name: a, cluster: {pool: rbd}, lease: 4s, renew_interval: 3s, ana_groups: [{id: 3, preferred: a}]}", "gateway.renew_interval: 3s must be positive and below lease - step_down_margin (3s)"},
		{"gateway: {name: a, cluster: {pool: rbd}, leese: 4s, ana_groups: [{id: 3, preferred: a}]}", "gateway.leese: unknown key"},
		{"gateway: {name: a, cluster: {pool: rbd}, backend_window: 1s, ana_groups: [{id: 3, preferred: a}]}", "gateway.backend_window: 1s is out of range (renew_interval 2.5s..10m)"},
		{"gateway: {name: a, cluster: {pool: rbd}, backend_backoff: 5s, ana_groups: [{id: 3, preferred: a}]}", "gateway.backend_backoff: 5s is out of range (lease 10s..24h)"},
		{"gateway: {name: a, cluster: {pool: rbd}, backend_backoff: 1m, backend_max_backoff: 30s, ana_groups: [{id: 3, preferred: a}]}", "gateway.backend_max_backoff: 30s is out of range (backend_backoff 1m0s..168h)"},
	} {
		isolate(t)
		f := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(f, []byte(base+c.gw+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := load(t, "--config", f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.gw, err, c.want)
		}
	}
	_ = target.MaxANAGroup
}

// TestBinaryGatewayNotBuilt: the default (static) build refuses a gateway
// section at start with EX_CONFIG, saying what to build, after starting
// nothing it would keep.
func TestBinaryGatewayNotBuilt(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "gw.yaml", fmt.Sprintf(`daemon: {control_socket: %s}
gateway: {name: a, cluster: {pool: rbd}, ana_groups: [{id: 1, preferred: a}]}
subsystems:
  - nqn: nqn.2024-01.com.example:gw
    allow_any_host: true
    namespaces: [{nsid: 1, backend: {kind: memory, size: 1MiB}}]
ports:
  - {id: 1, address: 127.0.0.1, service_id: 0, subsystems: [nqn.2024-01.com.example:gw]}
`, filepath.Join(dir, "ctl.sock")))
	cmd := exec.Command(bin, "--config", cfg, "--log-format", "console")
	cmd.Env = testnode.Env(dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitConfig || !strings.Contains(stderr.String(), "needs the Ceph client libraries") {
		t.Fatalf("nvmetd with a gateway section in the default build: %v, want exit %d; stderr:\n%s", err, exitConfig, stderr.String())
	}
}

// TestCheckConfigGatewayNotBuilt: --check-config of a build without the
// Ceph client libraries refuses a gateway section (the daemon would exit
// 78 at start), naming the section; in a build with them it is valid. The
// effective configuration shows the section, and no section where there is
// none.
func TestCheckConfigGatewayNotBuilt(t *testing.T) {
	isolate(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"--check-config", "--config", "../../configs/nvmetd-gateway.yaml"}, &stdout, &stderr)
	if gateway.Built {
		if code != exitOK || !strings.Contains(stdout.String(), "\ngateway:\n  name: gw-a\n") {
			t.Fatalf("--check-config of the gateway example: exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
	} else if code != exitFailure || !strings.Contains(stderr.String(), "gateway: the gateway group needs the Ceph client libraries") {
		t.Fatalf("--check-config of the gateway example without the Ceph libraries: exit %d, want %d naming the gateway section\n%s",
			code, exitFailure, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"--check-config"}, &stdout, io.Discard); code != exitOK || strings.Contains(stdout.String(), "gateway") {
		t.Fatalf("--check-config of the built-in default: exit %d, a gateway section in\n%s", code, stdout.String())
	}
}
