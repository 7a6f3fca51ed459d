package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exposure runs systemd-analyze security --offline on a unit file (its
// ExecStart pointed at /bin/true, which exists) and returns the overall
// exposure level (0 safest, 10 unsafe).
func exposure(t *testing.T, analyze, unit string) float64 {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^(Exec(?:Start|Reload))=\S+`).ReplaceAll(b, []byte("${1}=/bin/true"))
	path := filepath.Join(t.TempDir(), filepath.Base(unit))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestUnitHardening: systemd-analyze security of both units (the figures
// before and after the hardening are in test/bench/results/security/). The
// autoconnect unit was 9.6 (no hardening at all); it must stay free of
// anything that gives it its own mount namespace, since the nvmeof daemons
// it starts mount for the whole system.
func TestUnitHardening(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd)")
	}
	if v := exposure(t, analyze, "nvmetd.service"); v > 3.0 {
		t.Errorf("nvmetd.service: exposure %.1f, want at most 3.0", v)
	}
	if v := exposure(t, analyze, "nvmeof-autoconnect.service"); v > 5.0 {
		t.Errorf("nvmeof-autoconnect.service: exposure %.1f, want at most 5.0", v)
	}
	unit, err := os.ReadFile("nvmetd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ProcSubset=pid\n", "DevicePolicy=closed\n", "DeviceAllow=block-sd rw\n", "DeviceAllow=block-blkext rw\n",
		"DeviceAllow=block-device-mapper rw\n", "DeviceAllow=block-loop rw\n"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("nvmetd.service lacks %q", want)
		}
	}
	ac, err := os.ReadFile("nvmeof-autoconnect.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectHostname", "ProtectClock", "ProtectProc", "ProcSubset",
		"ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "DevicePolicy", "DeviceAllow", "MountFlags"} {
		if regexp.MustCompile(`(?m)^` + key + `=`).Match(ac) {
			t.Errorf("nvmeof-autoconnect.service sets %s: its mounts would be invisible to the system (or its devices denied)", key)
		}
	}
	for _, want := range []string{"NoNewPrivileges=yes\n", "CapabilityBoundingSet=", "SystemCallFilter=@system-service @mount\n", "RestrictNamespaces=yes\n"} {
		if !strings.Contains(string(ac), want) {
			t.Errorf("nvmeof-autoconnect.service lacks %q", want)
		}
	}
	// It verifies cleanly (ExecStart pointed at an existing binary).
	b := regexp.MustCompile(`(?m)^ExecStart=\S+`).ReplaceAll(ac, []byte("ExecStart=/bin/true"))
	path := filepath.Join(t.TempDir(), "nvmeof-autoconnect.service")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--man=no", path)
	cmd.Dir = filepath.Dir(path)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify nvmeof-autoconnect.service: %v\n%s", err, out)
	}
}
