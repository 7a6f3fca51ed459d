package target

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthConfig: the dhchap_* settings of hosts and the hosts of
// namespaces are validated with the field named, and never quote a secret.
func TestAuthConfig(t *testing.T) {
	key := genKey(t, testHostNQN)
	tests := []struct {
		name  string
		host  HostConfig
		ns    []string
		field string // "" for valid
	}{
		{"literal key", HostConfig{DHCHAPKey: key, DHCHAPCtrlKey: key, DHCHAPHash: "hmac(sha512)", DHCHAPDHGroup: "ffdhe8192"}, nil, ""},
		{"file key", HostConfig{DHCHAPKey: "file:/etc/nvmetd/k"}, nil, ""},
		{"bad key", HostConfig{DHCHAPKey: "DHHC-1:01:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2Vj:"}, nil, "hosts[0].dhchap_key"},
		{"empty file", HostConfig{DHCHAPKey: "file: "}, nil, "hosts[0].dhchap_key"},
		{"ctrl key alone", HostConfig{DHCHAPCtrlKey: key}, nil, "hosts[0].dhchap_ctrl_key"},
		{"bad hash", HostConfig{DHCHAPKey: key, DHCHAPHash: "md5"}, nil, "hosts[0].dhchap_hash"},
		{"bad group", HostConfig{DHCHAPKey: key, DHCHAPDHGroup: "ffdhe1024"}, nil, "hosts[0].dhchap_dhgroup"},
		{"namespace hosts", HostConfig{}, []string{testHostNQN, otherHost}, ""},
		{"namespace bad host", HostConfig{}, []string{"nqn.bad"}, "subsystems[0].namespaces[0].hosts[0]"},
		{"namespace duplicate host", HostConfig{}, []string{testHostNQN, testHostNQN}, "subsystems[0].namespaces[0].hosts[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, memNS(1, "1MiB"))
			tt.host.NQN = testHostNQN
			cfg.Hosts = []HostConfig{tt.host}
			cfg.Subsystems[0].Namespaces[0].Hosts = tt.ns
			err := cfg.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("%v, want a problem with %s", err, tt.field)
			}
			if k := tt.host.DHCHAPKey; len(k) > 10 && strings.Contains(err.Error(), k[10:]) {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
	cfg := testConfig(t)
	cfg.Subsystems[0].AllowAnyHost = false
	cfg.Subsystems[0].AllowedHosts = []string{otherHost}
	cfg.Subsystems[0].AuthRequired = true
	if w := strings.Join(cfg.Warnings(), "\n"); !strings.Contains(w, "requires authentication but allowed host "+otherHost+" has no dhchap_key") {
		t.Errorf("warnings: %s", w)
	}
}

// TestAuthKeyFiles: key files are read at start and reload; one that its
// group or others may read, a missing one, or one without a secret is
// refused, naming the field.
func TestAuthKeyFiles(t *testing.T) {
	key := genKey(t, testHostNQN)
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return "file:" + p
	}
	tests := []struct {
		name, key, ctrl, want string
	}{
		{"0600", write("a", key+"\n", 0o600), "", ""},
		{"0400 ctrl", write("b", key, 0o600), write("c", key, 0o400), ""},
		{"0640", write("d", key, 0o640), "", "hosts[0].dhchap_key: " + filepath.Join(dir, "d") + " is accessible by group or others"},
		{"0604 ctrl", write("e", key, 0o600), write("f", key, 0o604), "hosts[0].dhchap_ctrl_key"},
		{"missing", "file:" + filepath.Join(dir, "none"), "", "no such file"},
		{"garbage", write("g", "hello", 0o600), "", "does not start with DHHC-1"},
		{"directory", "file:" + dir, "", "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &Config{Hosts: []HostConfig{{NQN: testHostNQN, DHCHAPKey: tt.key, DHCHAPCtrlKey: tt.ctrl}}}
			keys, err := loadAuthKeys(cfg)
			// Check (nvmetd --check-config) says the same.
			if cerr := cfg.Check(); (cerr == nil) != (err == nil) {
				t.Errorf("Check: %v, loading: %v", cerr, err)
			}
			if tt.want == "" {
				if err != nil || keys[testHostNQN] == nil || (tt.ctrl != "") != (keys[testHostNQN].ctrl != nil) {
					t.Fatalf("%v %+v", err, keys)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want an error with %q", err, tt.want)
			}
		})
	}
}
