package initiator

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The host of the lab's captures (nvmeof/testdata/golden).
const (
	labHostNQN  = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-000000000001"
	labSubNQN   = "nqn.2024-01.io.nvmeof-lab:kernel-target"
	labHostUUID = "6e766d65-6f66-4c61-9b00-000000000001"
)

func writeFiles(t *testing.T, files map[string]string) HostPaths {
	t.Helper()
	dir := t.TempDir()
	p := HostPaths{
		HostNQN:     filepath.Join(dir, "etc/nvme/hostnqn"),
		HostID:      filepath.Join(dir, "etc/nvme/hostid"),
		ProductUUID: filepath.Join(dir, "sys/product_uuid"),
		DeviceTree:  filepath.Join(dir, "sys/ibm,partition-uuid"),
		MachineID:   filepath.Join(dir, "etc/machine-id"),
	}
	for name, content := range files {
		var path string
		switch name {
		case "hostnqn":
			path = p.HostNQN
		case "hostid":
			path = p.HostID
		case "product_uuid":
			path = p.ProductUUID
		case "devicetree":
			path = p.DeviceTree
		case "machine-id":
			path = p.MachineID
		default:
			t.Fatal(name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestHostIdentity(t *testing.T) {
	const machineID = "0123456789abcdef0123456789abcdef\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		nqn, id string
		source  string
	}{
		{"both files", map[string]string{"hostnqn": labSubNQN + "\n", "hostid": labHostUUID + "\n", "machine-id": machineID},
			labSubNQN, labHostUUID, "file"},
		{"nqn only, uuid form", map[string]string{"hostnqn": labHostNQN + "\n"}, labHostNQN, labHostUUID, "file+derived"},
		{"id only", map[string]string{"hostid": strings.ToUpper(labHostUUID)}, labHostNQN, labHostUUID, "file+derived"},
		{"dmi", map[string]string{"product_uuid": "4c4c4544-0034-3010-8035-b9c04f503432\n", "machine-id": machineID},
			"nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-3010-8035-b9c04f503432", "4c4c4544-0034-3010-8035-b9c04f503432", "dmi"},
		{"device tree", map[string]string{"product_uuid": "00000000-0000-0000-0000-000000000000\n", "devicetree": "12345678-1234-1234-1234-123456789abc\x00"},
			"nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc", "12345678-1234-1234-1234-123456789abc", "device-tree"},
		// HMAC-SHA256(key = machine ID bytes, data = libnvme's NVME_HOSTNQN_ID),
		// first 16 bytes made a v4 UUID (systemd sd_id128_get_app_specific).
		{"machine-id", map[string]string{"machine-id": machineID},
			"nqn.2014-08.org.nvmexpress:uuid:" + machineIDUUID, machineIDUUID, "machine-id"},
		{"nqn not uuid form, machine-id", map[string]string{"hostnqn": labSubNQN, "machine-id": machineID},
			labSubNQN, machineIDUUID, "file+machine-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFiles(t, tc.files)
			id, err := HostIdentityFrom(p)
			if err != nil {
				t.Fatal(err)
			}
			if id.NQN != tc.nqn || nvmeof.FormatUUID(id.ID) != tc.id || id.Source != tc.source {
				t.Errorf("got %q %s %s, want %q %s %s", id.NQN, nvmeof.FormatUUID(id.ID), id.Source, tc.nqn, tc.id, tc.source)
			}
			// Stable: the same answer again.
			if again, _ := HostIdentityFrom(p); again != id {
				t.Error("identity not stable")
			}
		})
	}
	// Nothing to go on: a random v4 UUID.
	id, err := HostIdentityFrom(writeFiles(t, nil))
	if err != nil || id.Source != "random" || id.ID[6]>>4 != 4 || id.ID[8]&0xC0 != 0x80 || nvmeof.ValidateNQN(id.NQN) != nil {
		t.Errorf("random: %+v %v", id, err)
	}
	// Malformed files are errors.
	for _, files := range []map[string]string{{"hostnqn": "not-an-nqn"}, {"hostid": "xyz"}, {"hostnqn": labHostNQN, "hostid": "xyz"}} {
		if _, err := HostIdentityFrom(writeFiles(t, files)); err == nil {
			t.Errorf("%v accepted", files)
		}
	}
}

// machineIDUUID is the app-specific ID of machine ID
// 0123456789abcdef0123456789abcdef for libnvme's application ID, computed
// independently of the Go code with Python:
//
//	k = bytes.fromhex('0123456789abcdef0123456789abcdef')
//	app = bytes.fromhex('c7f4618112be49328c83106f9dddd86b')
//	h = bytearray(hmac.new(k, app, hashlib.sha256).digest()[:16])
//	h[6] = h[6] & 0x0f | 0x40; h[8] = h[8] & 0x3f | 0x80
const machineIDUUID = "b9ab29c5-8029-47ad-8087-adf3ca83bb9a"

func TestWriteHostIdentity(t *testing.T) {
	p := writeFiles(t, map[string]string{"machine-id": "0123456789abcdef0123456789abcdef\n"})
	gen, err := GenerateHostIdentity(p)
	if err != nil || gen.Source != "machine-id" {
		t.Fatalf("%+v %v", gen, err)
	}
	if err := WriteHostIdentity(p, gen); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p.HostNQN)
	if string(b) != gen.NQN+"\n" {
		t.Errorf("hostnqn file %q", b)
	}
	b, _ = os.ReadFile(p.HostID)
	if string(b) != nvmeof.FormatUUID(gen.ID)+"\n" {
		t.Errorf("hostid file %q", b)
	}
	st, _ := os.Stat(p.HostNQN)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	got, err := HostIdentityFrom(p)
	if err != nil || got.NQN != gen.NQN || got.ID != gen.ID || got.Source != "file" {
		t.Errorf("read back %+v %v", got, err)
	}
	if err := WriteHostIdentity(p, Identity{NQN: "bad"}); err == nil {
		t.Error("invalid NQN written")
	}
	entries, _ := os.ReadDir(filepath.Dir(p.HostNQN))
	if len(entries) != 2 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// TestPersistentHostIdentity (issue 23.3): with neither /etc/nvme/hostnqn
// nor /etc/nvme/hostid, the identity derived on first use is saved to both
// and used from then on; an existing file is never replaced; a directory
// that cannot be written leaves the derived identity in use, unsaved.
func TestPersistentHostIdentity(t *testing.T) {
	const machineID = "0123456789abcdef0123456789abcdef\n"
	t.Run("saved-on-first-use", func(t *testing.T) {
		p := writeFiles(t, map[string]string{"machine-id": machineID})
		id, err := PersistentHostIdentity(p)
		if err != nil || id.Source != "machine-id" || !strings.HasPrefix(id.Persisted, "saved to ") {
			t.Fatalf("first use: %+v, %v", id, err)
		}
		nqn, _ := os.ReadFile(p.HostNQN)
		hid, _ := os.ReadFile(p.HostID)
		if string(nqn) != id.NQN+"\n" || string(hid) != nvmeof.FormatUUID(id.ID)+"\n" {
			t.Fatalf("saved %q %q, want %s %s", nqn, hid, id.NQN, nvmeof.FormatUUID(id.ID))
		}
		for _, f := range []string{p.HostNQN, p.HostID} {
			if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("%s: %v %v", f, st.Mode(), err)
			}
		}
		// The machine's ID changes (a clone): the saved identity stays.
		if err := os.WriteFile(p.MachineID, []byte("fedcba9876543210fedcba9876543210\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := PersistentHostIdentity(p)
		if err != nil || again.NQN != id.NQN || again.ID != id.ID || again.Source != "file" || again.Persisted != "" {
			t.Fatalf("second use: %+v, %v; want %s from the files", again, err, id.NQN)
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p.HostNQN), ".*tmp*")); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	})
	t.Run("one-file-exists", func(t *testing.T) {
		p := writeFiles(t, map[string]string{"hostnqn": "nqn.2024-01.com.example:host1\n", "machine-id": machineID})
		id, err := PersistentHostIdentity(p)
		if err != nil || id.NQN != "nqn.2024-01.com.example:host1" || id.Source != "file+machine-id" {
			t.Fatalf("%+v, %v", id, err)
		}
		if _, err := os.Stat(p.HostID); !os.IsNotExist(err) {
			t.Errorf("host ID written beside an existing host NQN: %v", err)
		}
		if b, _ := os.ReadFile(p.HostNQN); string(b) != "nqn.2024-01.com.example:host1\n" {
			t.Errorf("host NQN file changed: %q", b)
		}
	})
	t.Run("never-replaces", func(t *testing.T) {
		p := writeFiles(t, map[string]string{"hostid": labHostUUID + "\n"})
		if err := createFileExclusive(p.HostID, "6e766d65-6f66-4c61-9b00-0000000000ff\n"); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create over an existing file: %v", err)
		}
		if b, _ := os.ReadFile(p.HostID); string(b) != labHostUUID+"\n" {
			t.Fatalf("existing file replaced: %q", b)
		}
	})
	t.Run("first-uses-race", func(t *testing.T) {
		// No stable machine UUID: every derivation is random, so only
		// the files make the identity stable; concurrent first uses
		// must all end with the one that was saved.
		p := writeFiles(t, nil)
		const n = 16
		ids := make([]Identity, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); ids[i], errs[i] = PersistentHostIdentity(p) }()
		}
		wg.Wait()
		saved, err := HostIdentityFrom(p)
		if err != nil || saved.Source != "file" {
			t.Fatalf("after the race: %+v, %v", saved, err)
		}
		for i := range n {
			if errs[i] != nil || ids[i].NQN != saved.NQN || ids[i].ID != saved.ID {
				t.Errorf("use %d: %+v, %v; saved %s", i, ids[i], errs[i], saved.NQN)
			}
		}
	})
	t.Run("not-writable", func(t *testing.T) {
		p := writeFiles(t, map[string]string{"machine-id": machineID})
		// /etc/nvme cannot be made, as on a read-only /etc or for a user
		// without write access (procfs takes no new directory, not even
		// from root).
		p.HostNQN, p.HostID = "/proc/nvmetd-test-no-such-dir/nvme/hostnqn", "/proc/nvmetd-test-no-such-dir/nvme/hostid"
		id, err := PersistentHostIdentity(p)
		if err != nil || id.Source != "machine-id" || !strings.HasPrefix(id.Persisted, "not saved: ") {
			t.Fatalf("%+v, %v", id, err)
		}
		want, _ := GenerateHostIdentity(p)
		if id.NQN != want.NQN {
			t.Errorf("unsaved identity %s, want the derived %s", id.NQN, want.NQN)
		}
	})
}
