package initiator

import (
	"os"
	"path/filepath"
	"strings"
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
