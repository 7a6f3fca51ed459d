package daemon

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof/auth"

	"github.com/nvmetd/nvmetd/target/configfile"
)

// readAsNobody reads path as the unprivileged user nobody and returns what
// it read (an error if it could not).
func readAsNobody(t *testing.T, path string) (string, error) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "cat", path).CombinedOutput()
	return string(out), err
}

// TestLiteralSecretsStayPrivate: a configuration file with a literal
// DH-HMAC-CHAP key, mode 0644 as an admin (or the old package) left it.
// The daemon warns at start; --check-config does not print the key; a
// persisted change (nvmetctl save, --persist) writes the file 0600, so
// another local user can no longer read the key.
func TestLiteralSecretsStayPrivate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: reads the file as the user nobody through setpriv")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	dir := isolate(t)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const host = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e2"
	key, err := auth.GenerateKey(auth.KeyOptions{NQN: host, HMAC: 1}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, dir, "nvmetd.yaml", `# an admin's configuration
daemon: {control_socket: `+filepath.Join(dir, "ctl.sock")+`}
hosts:
  - nqn: `+host+`
    dhchap_key: "`+key+`"
ports:
  - {id: 1, address: 127.0.0.1, service_id: 4420, subsystems: [nqn.2014-08.org.example:a]}
subsystems:
  - nqn: nqn.2014-08.org.example:a
    allowed_hosts: [`+host+`]
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 1MiB}}
`)
	if out, err := readAsNobody(t, file); err != nil || !strings.Contains(out, key) {
		t.Fatalf("the test's 0644 file is not readable by nobody: %v", err)
	}

	// The warning at start (and in --check-config).
	lc, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(lc.Warnings, "\n"), "holds literal DH-HMAC-CHAP secrets and other users may read it (mode 0644)") {
		t.Errorf("no warning about the readable file: %q", lc.Warnings)
	}

	// --check-config prints the effective configuration without the key.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--check-config", "--config", file}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--check-config: exit %d: %s", code, stderr.String())
	}
	secret := strings.Split(key, ":")[2]
	if strings.Contains(stdout.String()+stderr.String(), secret) {
		t.Errorf("--check-config prints the literal key:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), redacted) {
		t.Errorf("--check-config does not say the key is redacted:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "other users may read it") {
		t.Errorf("--check-config does not warn about the mode:\n%s", stderr.String())
	}

	// A persisted change writes the file 0600.
	doc, _ := os.ReadFile(file)
	if _, err := configfile.Save(file, sha256.Sum256(doc), false, lc.Target, ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("persisted file: %v %v", fi.Mode(), err)
	}
	if out, err := readAsNobody(t, file); err == nil || strings.Contains(out, secret) {
		t.Errorf("nobody reads the persisted file: %v", err)
	}
	lc, err = load(t, "--config", file)
	if err != nil || strings.Contains(strings.Join(lc.Warnings, "\n"), "other users may read it") {
		t.Errorf("after persisting: %v %q", err, lc.Warnings)
	}

	// Without literal secrets the file keeps its mode.
	plain := writeFile(t, dir, "plain.yaml", strings.Replace(string(doc), `dhchap_key: "`+key+`"`, "dhchap_key: file:/etc/nvmetd/h.key", 1))
	pdoc, _ := os.ReadFile(plain)
	plc, err := load(t, "--config", plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := configfile.Save(plain, sha256.Sum256(pdoc), false, plc.Target, ""); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(plain); fi.Mode().Perm() != 0o644 {
		t.Errorf("a file without literal secrets changed mode to %v", fi.Mode())
	}
}

// TestCheckConfigRefusesLoosePasswordFile: --check-config refuses what
// the daemon refuses at start, a metrics password file others may read.
func TestCheckConfigRefusesLoosePasswordFile(t *testing.T) {
	dir := isolate(t)
	pw := writeFile(t, dir, "metrics.pw", "s3cret\n") // 0644
	file := writeFile(t, dir, "nvmetd.yaml", `daemon: {control_socket: `+filepath.Join(dir, "ctl.sock")+`}
ports:
  - {id: 1, address: 127.0.0.1, service_id: 4420, subsystems: [nqn.2014-08.org.example:a]}
subsystems:
  - nqn: nqn.2014-08.org.example:a
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 1MiB}}
metrics: {socket: `+filepath.Join(dir, "m.sock")+`, basic_auth_user: prom, basic_auth_password_file: `+pw+`}
`)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--check-config", "--config", file}, &stdout, &stderr); code != exitFailure ||
		!strings.Contains(stderr.String(), "metrics.basic_auth_password_file") || !strings.Contains(stderr.String(), "group or others") {
		t.Errorf("--check-config with a 0644 password file: exit %d\n%s", code, stderr.String())
	}
	if err := os.Chmod(pw, 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"--check-config", "--config", file}, &stdout, &stderr); code != exitOK {
		t.Errorf("--check-config with a 0600 password file: exit %d\n%s", code, stderr.String())
	}
}
