package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestE2EAuth: nvmeof connect -S/-C (literal and file:) against an nvmetd
// that requires DH-HMAC-CHAP of the host, with keys made by nvmeof
// gen-dhchap-key; a wrong key and a missing key are refused with the
// reason; the secrets never appear on a command line.
func TestE2EAuth(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	const host = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e2"
	key := strings.TrimSpace(e.must("gen-dhchap-key", "-m", "1", "-n", host))
	ctrlKey := strings.TrimSpace(e.must("gen-dhchap-key", "-m", "3", "-n", testNQN))
	wrong := strings.TrimSpace(e.must("gen-dhchap-key", "-m", "1", "-n", host))
	ctrlFile := filepath.Join(e.dir, "ctrl.key")
	if err := os.WriteFile(ctrlFile, []byte(ctrlKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	_, bin := bins(t)
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
hosts:
  - nqn: %s
    dhchap_key: "%s"
    dhchap_ctrl_key: file:%s
    dhchap_dhgroup: ffdhe3072
ports:
  - id: 1
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
subsystems:
  - nqn: %s
    allowed_hosts: [%s]
    auth_required: true
    namespaces:
      - nsid: 1
        backend:
          kind: memory
          size: 16MiB
`, filepath.Join(e.dir, "nvmetd.sock"), host, key, ctrlFile, port, testNQN, testNQN, host)
	p := &nvmetdProc{t: t, bin: bin, cfg: filepath.Join(e.dir, "nvmetd.yaml"), logf: filepath.Join(e.dir, "nvmetd.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), NQN: testNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)
	fab := []string{"-t", "rdma", "-a", "127.0.0.1", "-s", strconv.Itoa(port), "-n", testNQN, "-q", host, "--ctrl-loss-tmo", "0"}

	refused := func(why, want string, args ...string) {
		t.Helper()
		if _, err := e.run(append(append([]string{"connect"}, args...), fab...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("connect %s: %v, want an error with %q", why, err, want)
		}
	}
	refused("without a secret", "no DH-HMAC-CHAP secret")
	refused("with a wrong secret", "authentication (qid 0)", "-S", wrong)
	// The controller key in a file others may read is refused by the host.
	loose := filepath.Join(e.dir, "loose.key")
	if err := os.WriteFile(loose, []byte(ctrlKey), 0o644); err != nil {
		t.Fatal(err)
	}
	refused("with a world-readable key file", "group or others", "-S", key, "-C", "file:"+loose)
	out := e.must(append([]string{"connect", "-S", key, "-C", "file:" + ctrlFile}, fab...)...)
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect:\n%s", out)
	}
	if l := e.list(); len(l) != 1 || l[0].State != "live" {
		t.Fatalf("list: %+v", l)
	}
	// No process shows a secret on its command line.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "DHHC-1") {
			t.Errorf("%s shows a secret: %q", f, b)
		}
	}
	e.must("disconnect-all")
}

// TestE2EDefaultSubsystemKey (issue 22.5): nvmetd's built-in default
// subsystem requires DH-HMAC-CHAP of this machine's host NQN with the key
// in nvmetd's data directory. The target here is configured as that
// default is (subsystem NQN from default-subsystem.uuid, one allowed host
// with default-host.key, authentication required). connect as root with
// no --dhchap-secret picks the key up and connects; nobody, who cannot
// read the key, fails authentication.
func TestE2EDefaultSubsystemKey(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	id, err := initiator.HostIdentity()
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(e.dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	subUUID := [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0xde, 0xf1}
	subNQN := nvmeof.UUIDNQN(subUUID)
	key := strings.TrimSpace(e.must("gen-dhchap-key", "-m", "1", "-n", id.NQN))
	if err := os.WriteFile(filepath.Join(data, "default-subsystem.uuid"), []byte(nvmeof.FormatUUID(subUUID)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "default-host.key"), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	_, bin := bins(t)
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
hosts:
  - nqn: %s
    dhchap_key: file:%s
ports:
  - id: 1
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
subsystems:
  - nqn: %s
    allowed_hosts: [%s]
    auth_required: true
    namespaces:
      - nsid: 1
        backend:
          kind: memory
          size: 16MiB
`, filepath.Join(e.dir, "nvmetd.sock"), id.NQN, filepath.Join(data, "default-host.key"), port, subNQN, subNQN, id.NQN)
	p := &nvmetdProc{t: t, bin: bin, cfg: filepath.Join(e.dir, "nvmetd.yaml"), logf: filepath.Join(e.dir, "nvmetd.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), NQN: subNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)
	t.Setenv("NVMETD_DATA_DIR", data) // e.run passes the environment on

	// Another local user, with the right host NQN but no key: refused.
	if err := os.Chmod(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nvmeofBin, _ := bins(t)
	if err := os.Chmod(filepath.Dir(nvmeofBin), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := asNobody(t, "env", "NVMETD_DATA_DIR="+data, "NVMEOF_STATE_DIR="+filepath.Join(e.dir, "nobody"),
		nvmeofBin, "bench", "-a", "127.0.0.1", "-s", strconv.Itoa(port), "-n", subNQN, "--rw", "randread", "--runtime", "100ms", "-l", "0")
	if err == nil || !strings.Contains(out, "authentication") {
		t.Fatalf("nobody reached the default subsystem: %v\n%s", err, out)
	}

	out = e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(port), "-n", subNQN, "--ctrl-loss-tmo", "0")
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect:\n%s", out)
	}
	if l := e.list(); len(l) != 1 || l[0].State != "live" {
		t.Fatalf("list: %+v", l)
	}
	logb, _ := os.ReadFile(filepath.Join(e.state, "nvme0.log"))
	if !strings.Contains(string(logb), filepath.Join(data, "default-host.key")) {
		t.Errorf("the daemon's log does not say which key file it used:\n%s", logb)
	}
	if strings.Contains(string(logb), key) {
		t.Errorf("the daemon's log shows the secret")
	}
	e.must("disconnect-all")
}

// TestE2EAutoconnectSecrets (issue 22.8): autoconnect with a config.json
// port's dhchap_key and a discovery.conf line's --dhchap-secret connects
// to a target that requires DH-HMAC-CHAP, and prints no secret. Before,
// the secrets were dropped (the connects failed) and discovery.conf's
// were printed to stderr, the journal of nvmeof-autoconnect.service.
func TestE2EAutoconnectSecrets(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	const host = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e3"
	key := strings.TrimSpace(e.must("gen-dhchap-key", "-m", "1", "-n", host))
	port := freePort(t)
	_, bin := bins(t)
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
hosts:
  - nqn: %s
    dhchap_key: "%s"
ports:
  - id: 1
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
subsystems:
  - nqn: %s
    allowed_hosts: [%s]
    auth_required: true
    namespaces:
      - nsid: 1
        backend:
          kind: memory
          size: 16MiB
`, filepath.Join(e.dir, "nvmetd.sock"), host, key, port, testNQN, testNQN, host)
	p := &nvmetdProc{t: t, bin: bin, cfg: filepath.Join(e.dir, "nvmetd.yaml"), logf: filepath.Join(e.dir, "nvmetd.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), NQN: testNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)

	cfgJSON := filepath.Join(e.dir, "config.json")
	js := fmt.Sprintf(`[{"hostnqn": %q, "subsystems": [{"nqn": %q, "ports": [{"transport": "rdma", "traddr": "127.0.0.1", "trsvcid": "%d", "ctrl_loss_tmo": 0, "dhchap_key": %q}]}]}]`,
		host, testNQN, port, key)
	if err := os.WriteFile(cfgJSON, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	disc := filepath.Join(e.dir, "discovery.conf")
	if err := os.WriteFile(disc, []byte(fmt.Sprintf("-t rdma -a 127.0.0.1 -s %d -q %s -l 0 -S %s\n", port, host, key)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := withTimeout(5 * time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "autoconnect", "--config", cfgJSON, "--discovery-conf", disc)
	cmd.Env = append(os.Environ(), "NVMEOF_STATE_DIR="+e.state)
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "DHHC-1") {
		t.Errorf("autoconnect printed a secret:\n%s", out)
	}
	if err != nil {
		t.Fatalf("autoconnect: %v\n%s", err, out)
	}
	if l := e.list(); len(l) != 1 || l[0].State != "live" || l[0].SubNQN != testNQN {
		t.Fatalf("list: %+v\nautoconnect:\n%s", l, out)
	}
	// The discovery.conf line found the same subsystem, connected: its
	// connect-all authenticated to the discovery controller's subsystem
	// list and skipped it.
	if !strings.Contains(string(out), "already connected") {
		t.Errorf("autoconnect output:\n%s", out)
	}
	e.must("disconnect-all")
}

// TestE2EBuiltinDefault (issue 22.5): nvmetd run with no configuration
// (its built-in default: DH-HMAC-CHAP required of this machine's host
// NQN, the key generated into its data directory). connect as root, with
// nothing but the address and the NQN, finds the key there and connects
// and mounts; nobody, with this machine's host NQN but no key it may read,
// fails authentication.
func TestE2EBuiltinDefault(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	if err := os.Chmod(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, bin := bins(t)
	data := filepath.Join(e.dir, "data")
	port := strconv.Itoa(freePort(t))
	p := testnode.Start(t, bin, testnode.Env(e.dir), "127.0.0.1:"+port, "--data-dir", data, "--listen", "127.0.0.1:"+port,
		"--control-socket", filepath.Join(e.dir, "default.sock"), "--default-size", "64MiB", "--log-format", "console")
	defer p.Stop(syscall.SIGTERM)
	b, err := os.ReadFile(filepath.Join(data, "default-subsystem.uuid"))
	if err != nil {
		t.Fatalf("the built-in default wrote no subsystem UUID: %v\n%s", err, p.Stderr.String())
	}
	u, err := nvmeof.ParseUUID(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	nqn := nvmeof.UUIDNQN(u)
	t.Setenv("NVMETD_DATA_DIR", data) // e.run passes the environment on

	nvmeofBin, _ := bins(t)
	if err := os.Chmod(filepath.Dir(nvmeofBin), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := asNobody(t, "env", "NVMETD_DATA_DIR="+data, "HOME=/nonexistent", "NVMEOF_STATE_DIR="+filepath.Join(e.dir, "nobody"),
		nvmeofBin, "bench", "-a", "127.0.0.1", "-s", port, "-n", nqn, "--rw", "write", "--runtime", "100ms", "-l", "0")
	if err == nil || !strings.Contains(out, "authentication") {
		t.Fatalf("nobody reached the built-in default's namespace: %v\n%s", err, out)
	}

	mnt := filepath.Join(e.dir, "mnt")
	out = e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", nqn, "--mount", mnt, "--mkfs", "--ctrl-loss-tmo", "0")
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect:\n%s", out)
	}
	if err := writeFileSync(filepath.Join(mnt, "f"), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	e.must("disconnect", "-n", nqn)
}
