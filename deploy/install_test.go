package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildNvmetd builds the daemon for the install script to install, once
// per test run.
func buildNvmetd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not building nvmetd")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nvmetd-deploy-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "nvmetd")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/nvmetd").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// install runs install.sh with DESTDIR=dest and args; it returns the exit
// code and the combined output.
func install(t *testing.T, dest string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"install.sh"}, args...)...)
	cmd.Env = append(os.Environ(), "DESTDIR="+dest)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestInstallDestdir installs into a DESTDIR, reinstalls over an edited
// configuration, and uninstalls.
func TestInstallDestdir(t *testing.T) {
	bin := buildNvmetd(t)
	dest := t.TempDir()
	code, out := install(t, dest, "--binary", bin)
	if code != 0 {
		t.Fatalf("install: exit %d\n%s", code, out)
	}
	sbin := filepath.Join(dest, "usr/local/sbin/nvmetd")
	unit := filepath.Join(dest, "etc/systemd/system/nvmetd.service")
	conf := filepath.Join(dest, "etc/nvmetd/nvmetd.yaml")
	if m := mode(t, sbin); m != 0o755 {
		t.Errorf("binary mode %o", m)
	}
	if m := mode(t, unit); m != 0o644 {
		t.Errorf("unit mode %o", m)
	}
	if m := mode(t, conf); m != 0o640 {
		t.Errorf("config mode %o", m)
	}
	if !strings.Contains(out, "checked "+conf+": valid") {
		t.Errorf("the installed configuration was not checked:\n%s", out)
	}
	if strings.Contains(out, "daemon-reload") {
		t.Errorf("systemctl run for a DESTDIR install:\n%s", out)
	}
	example, _ := os.ReadFile("../configs/nvmetd.yaml")
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, example) {
		t.Error("installed configuration differs from configs/nvmetd.yaml")
	}

	// An edited configuration is kept; the new example goes beside it.
	if err := os.WriteFile(conf, []byte("ports: []\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if code, out := install(t, dest, "--binary", bin); code != 0 || !strings.Contains(out, "kept "+conf) {
		t.Fatalf("reinstall: exit %d\n%s", code, out)
	}
	if got, _ := os.ReadFile(conf); string(got) != "ports: []\n" {
		t.Error("reinstall overwrote the configuration")
	}
	if _, err := os.Stat(conf + ".example"); err != nil {
		t.Error(err)
	}

	if code, out := install(t, dest, "--uninstall"); code != 0 {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	for _, p := range []string{sbin, unit} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after --uninstall: %v", p, err)
		}
	}
	if _, err := os.Stat(conf); err != nil {
		t.Errorf("--uninstall removed the configuration: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dest, "var/lib/nvmetd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if code, out := install(t, dest, "--uninstall", "--purge"); code != 0 {
		t.Fatalf("purge: exit %d\n%s", code, out)
	}
	for _, p := range []string{filepath.Dir(conf), filepath.Join(dest, "var/lib/nvmetd")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after --purge: %v", p, err)
		}
	}
}

// TestInstallPaths: --prefix, --sysconfdir and --unitdir reach the unit.
func TestInstallPaths(t *testing.T) {
	bin := buildNvmetd(t)
	dest := t.TempDir()
	code, out := install(t, dest, "--binary", bin, "--prefix", "/usr", "--sysconfdir=/opt/etc", "--unitdir", "/usr/lib/systemd/system")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/nvmetd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/sbin/nvmetd --config /opt/etc/nvmetd/nvmetd.yaml\n") {
		t.Errorf("ExecStart not rewritten:\n%s", unit)
	}
	for _, p := range []string{"usr/sbin/nvmetd", "opt/etc/nvmetd/nvmetd.yaml"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Error(err)
		}
	}
}

func TestInstallUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "usage: install.sh"},
		{[]string{"--frobnicate"}, 1, "unknown option: --frobnicate"},
		{[]string{"--prefix"}, 1, "--prefix needs a value"},
		{[]string{"--prefix", "usr"}, 1, "directories must be absolute: usr"},
		{[]string{"--purge"}, 1, "--purge only goes with --uninstall"},
		{[]string{"--binary", "/nonexistent/nvmetd"}, 1, "no binary at /nonexistent/nvmetd"},
	}
	for _, tt := range tests {
		code, out := install(t, t.TempDir(), tt.args...)
		if code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("install.sh %q: exit %d, want %d; output:\n%s", tt.args, code, tt.code, out)
		}
	}
}

// TestUnitVerify checks the installed unit with systemd-analyze verify: no
// warning at all (verify exits 0 on unknown keys, so its output must be
// empty). The unit is verified in place with ExecStart pointing at the
// DESTDIR binary, since --root would need a whole systemd tree.
func TestUnitVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd); the unit is not verified")
	}
	bin := buildNvmetd(t)
	dest := t.TempDir()
	if code, out := install(t, dest, "--binary", bin); code != 0 {
		t.Fatalf("install: exit %d\n%s", code, out)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/nvmetd.service"))
	if err != nil {
		t.Fatal(err)
	}
	sbin := filepath.Join(dest, "usr/local/sbin/nvmetd")
	local := regexp.MustCompile(`(?m)^(Exec(?:Start|Reload))=/usr/local/sbin/nvmetd `).ReplaceAll(unit, []byte("${1}="+sbin+" "))
	if bytes.Equal(local, unit) {
		t.Fatal("no ExecStart=/usr/local/sbin/nvmetd in the unit")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nvmetd.service")
	if err := os.WriteFile(path, local, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--man=no", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The settings this project relies on are present.
	for _, want := range []string{"Type=notify\n", "ExecReload=/usr/local/sbin/nvmetd reload --config /etc/nvmetd/nvmetd.yaml\n", "WatchdogSec=30s\n",
		"Restart=on-failure\n", "RestartPreventExitStatus=78\n", "ProtectSystem=strict\n", "StateDirectory=nvmetd\n",
		"RuntimeDirectory=nvmetd\n", "ConfigurationDirectory=nvmetd\n", "NoNewPrivileges=yes\n",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK\n"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("unit lacks %q", want)
		}
	}
}
