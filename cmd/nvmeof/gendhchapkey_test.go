package main

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

const genKeyNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-000000000001"

func genKey(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"gen-dhchap-key"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestGenDHCHAPKey(t *testing.T) {
	for _, m := range []int{0, 1, 2, 3} {
		out, errs, code := genKey(t, "-m", strconv.Itoa(m), "-n", genKeyNQN)
		s, err := auth.ParseSecret(out)
		if code != exitOK || errs != "" || err != nil || int(s.Hash) != m || !strings.HasSuffix(out, ":\n") {
			t.Errorf("-m %d: %q %q %d %v", m, out, errs, code, err)
		}
	}
	// A given secret: the transformation is deterministic.
	secret := strings.Repeat("5a", 48)
	out, _, code := genKey(t, "--hmac=2", "--secret", secret, "--nqn", genKeyNQN, "--key-length", "48")
	want, err := auth.GenerateKey(auth.KeyOptions{Secret: secret, HMAC: 2, KeyLength: 48, NQN: genKeyNQN}, nil)
	if code != exitOK || err != nil || out != want+"\n" {
		t.Errorf("--secret: %q, want %q (%v)", out, want, err)
	}
	// nvme-cli's errors.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-m", "3", "-l", "32", "-n", genKeyNQN}, "Invalid key length 32 for SHA(512)"},
		{[]string{"-m", "5", "-n", genKeyNQN}, "Invalid HMAC identifier 5"},
		{[]string{"-s", "0102", "-n", genKeyNQN}, "Invalid key length (2 bytes)"},
	} {
		out, errs, code := genKey(t, tc.args...)
		if code != exitFailure || out != "" || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: %q %q %d", tc.args, out, errs, code)
		}
	}
	if _, _, code := genKey(t, "extra"); code != exitUsage {
		t.Errorf("extra argument: exit %d", code)
	}
}

// TestGenDHCHAPKeyNvmeCLI: keys of nvmeof gen-dhchap-key pass nvme
// check-dhchap-key, and with the same secret both tools print the same key.
func TestGenDHCHAPKeyNvmeCLI(t *testing.T) {
	nvme, err := exec.LookPath("nvme")
	if err != nil {
		t.Skip("nvme-cli is not installed: cannot compare with nvme gen-dhchap-key/check-dhchap-key")
	}
	for _, m := range []string{"0", "1", "2", "3"} {
		out, _, code := genKey(t, "-m", m, "-n", genKeyNQN)
		if code != exitOK {
			t.Fatal(code)
		}
		if res, err := exec.Command(nvme, "check-dhchap-key", "-k", strings.TrimSpace(out)).CombinedOutput(); err != nil ||
			!strings.Contains(string(res), "Key is valid (HMAC "+m) {
			t.Errorf("nvme check-dhchap-key %s: %s %v", out, res, err)
		}
		secret := strings.Repeat("c3", 32)
		l := "32"
		if m == "2" {
			secret, l = strings.Repeat("c3", 48), "48"
		} else if m == "3" {
			secret, l = strings.Repeat("c3", 64), "64"
		}
		theirs, err := exec.Command(nvme, "gen-dhchap-key", "-m", m, "-l", l, "-s", secret, "-n", genKeyNQN).Output()
		if err != nil {
			t.Fatal(err)
		}
		ours, _, _ := genKey(t, "-m", m, "-l", l, "-s", secret, "-n", genKeyNQN)
		if ours != string(theirs) {
			t.Errorf("-m %s: ours %q, nvme-cli %q", m, ours, theirs)
		}
		if _, err := auth.ParseSecret(string(theirs)); err != nil {
			t.Errorf("nvme-cli key %q: %v", theirs, err)
		}
	}
}
