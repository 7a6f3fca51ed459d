package auth

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-000000000001"

func TestParseSecretErrors(t *testing.T) {
	good := (&Secret{Hash: HashSHA256, Key: detBytes("k", 32)}).Encode()
	enc := good[10 : len(good)-1]
	for name, s := range map[string]string{
		"empty":          "",
		"prefix":         "DHHC-2:01:" + enc + ":",
		"hash 4":         "DHHC-1:04:" + enc + ":",
		"hash one digit": "DHHC-1:1:" + enc + ":",
		"hash hex":       "DHHC-1:0a:" + enc + ":",
		"no key":         "DHHC-1:01:",
		"not base64":     "DHHC-1:01:" + strings.Repeat("!", 48) + ":",
		"short key":      "DHHC-1:00:AAAA:",
		"bad crc":        good[:len(good)-3] + "A=:",
		"trailing data":  good + "x:",
		"length/hash":    (&Secret{Hash: HashSHA256, Key: detBytes("k", 48)}).Encode(),
		"40-byte key":    (&Secret{Key: detBytes("k", 40)}).Encode(),
	} {
		if _, err := ParseSecret(s); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("%s: %q: %v", name, s, err)
		}
	}
	// What the kernel also takes: white space, no final colon.
	for _, s := range []string{" " + good + "\n", strings.TrimSuffix(good, ":")} {
		if sec, err := ParseSecret(s); err != nil || sec.Hash != HashSHA256 {
			t.Errorf("%q: %v", s, err)
		}
	}
	sec, _ := ParseSecret(good)
	if strings.Contains(sec.String(), enc[:8]) || !strings.HasPrefix(sec.String(), "DHHC-1:01:") {
		t.Errorf("String discloses the key: %s", sec)
	}
}

func TestGenerateKeyOptions(t *testing.T) {
	secret32 := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		opt  KeyOptions
		err  string
		hash Hash
		n    int
	}{
		{KeyOptions{NQN: testHostNQN}, "", HashNone, 32},
		{KeyOptions{NQN: testHostNQN, KeyLength: 64}, "", HashNone, 64},
		{KeyOptions{NQN: testHostNQN, HMAC: 2}, "", HashSHA384, 48},
		{KeyOptions{NQN: testHostNQN, HMAC: 3, KeyLength: 64}, "", HashSHA512, 64},
		{KeyOptions{NQN: testHostNQN, HMAC: 1, Secret: secret32}, "", HashSHA256, 32},
		{KeyOptions{NQN: testHostNQN, HMAC: 4}, "Invalid HMAC identifier 4", 0, 0},
		{KeyOptions{NQN: testHostNQN, HMAC: 3, KeyLength: 32}, "Invalid key length 32 for SHA(512)", 0, 0},
		{KeyOptions{NQN: testHostNQN, KeyLength: 40}, "Invalid key length 40", 0, 0},
		{KeyOptions{NQN: testHostNQN, Secret: "0102"}, "Invalid key length (2 bytes)", 0, 0},
		{KeyOptions{NQN: testHostNQN, Secret: "zz"}, "Invalid secret 'zz'", 0, 0},
		{KeyOptions{}, "Could not read host NQN", 0, 0},
	} {
		k, err := GenerateKey(tc.opt, detReader("gen"))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%+v: %v, want %s", tc.opt, err, tc.err)
			}
			continue
		}
		s, perr := ParseSecret(k)
		if err != nil || perr != nil || s.Hash != tc.hash || len(s.Key) != tc.n {
			t.Errorf("%+v: %s %v %v", tc.opt, k, err, perr)
		}
	}
	if _, err := GenerateKey(KeyOptions{NQN: testHostNQN}, failingReader{}); err == nil {
		t.Error("no error from a failing random source")
	}
}

// nvmeCLI returns the path of nvme-cli or skips the test.
func nvmeCLI(t *testing.T) string {
	p, err := exec.LookPath("nvme")
	if err != nil {
		t.Skip("nvme-cli is not installed: cannot check keys against nvme gen-dhchap-key/check-dhchap-key")
	}
	if out, err := exec.Command(p, "gen-dhchap-key", "--help").CombinedOutput(); err != nil && !strings.Contains(string(out), "gen-dhchap-key") {
		t.Skipf("this nvme-cli has no gen-dhchap-key: %s", out)
	}
	return p
}

// TestNvmeCLIKeys checks that keys made by nvme gen-dhchap-key parse, that
// ours pass nvme check-dhchap-key, and that for a given secret both tools
// print the same key, for every transformation.
func TestNvmeCLIKeys(t *testing.T) {
	nvme := nvmeCLI(t)
	for _, hm := range []int{0, 1, 2, 3} {
		for _, n := range []int{32, 48, 64} {
			if hm != 0 && n != Hash(hm).Size() {
				continue
			}
			args := []string{"gen-dhchap-key", "-m", itoa(hm), "-l", itoa(n), "-n", testHostNQN}
			out, err := exec.Command(nvme, args...).Output()
			if err != nil {
				t.Fatalf("nvme %v: %v", args, err)
			}
			key := strings.TrimSpace(string(out))
			s, err := ParseSecret(key)
			if err != nil || s.Hash != Hash(hm) || len(s.Key) != n || s.Encode() != key {
				t.Errorf("nvme-cli key %s: %v", key, err)
			}

			secret := strings.Repeat("5a", n)
			out, err = exec.Command(nvme, "gen-dhchap-key", "-m", itoa(hm), "-l", itoa(n), "-s", secret, "-n", testHostNQN).Output()
			if err != nil {
				t.Fatal(err)
			}
			ours, err := GenerateKey(KeyOptions{Secret: secret, KeyLength: n, HMAC: hm, NQN: testHostNQN}, nil)
			if err != nil || ours != strings.TrimSpace(string(out)) {
				t.Errorf("hmac %d len %d: ours %s, nvme-cli %s (%v)", hm, n, ours, out, err)
			}

			ours, err = GenerateKey(KeyOptions{KeyLength: n, HMAC: hm, NQN: testHostNQN}, detReader(key))
			if err != nil {
				t.Fatal(err)
			}
			out, err = exec.Command(nvme, "check-dhchap-key", "-k", ours).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Key is valid") {
				t.Errorf("nvme check-dhchap-key %s: %s %v", ours, out, err)
			}
		}
	}
}
