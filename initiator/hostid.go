package initiator

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// This file is the host's identity on this machine (files of nvme-cli, DMI,
// /etc/machine-id): host side, so that package nvmeof stays free of I/O.

// Identity is a host's NVMe identity: the host NQN and the 128-bit host
// identifier (the Connect data HOSTID), as nvme-cli keeps them in
// /etc/nvme/hostnqn and /etc/nvme/hostid.
type Identity struct {
	NQN string
	ID  [16]byte
	// Source says where the identity came from: "file" (both files),
	// "file+derived" (one file, the other derived from it), "dmi"
	// (product_uuid), "device-tree", "machine-id" or "random".
	Source string
	// Persisted says what PersistentHostIdentity did with an identity it
	// derived (Source not "file..."): "saved to FILE and FILE", or why it
	// did not save it ("not saved: ..."). Empty otherwise.
	Persisted string
}

// HostPaths are the files HostIdentityFrom and WriteHostIdentity use.
// Empty paths are skipped.
type HostPaths struct {
	HostNQN     string // default /etc/nvme/hostnqn
	HostID      string // default /etc/nvme/hostid
	ProductUUID string // default /sys/class/dmi/id/product_uuid
	DeviceTree  string // default /sys/firmware/devicetree/base/ibm,partition-uuid
	MachineID   string // default /etc/machine-id
}

// DefaultHostPaths are the paths nvme-cli and libnvme use.
var DefaultHostPaths = HostPaths{
	HostNQN:     "/etc/nvme/hostnqn",
	HostID:      "/etc/nvme/hostid",
	ProductUUID: "/sys/class/dmi/id/product_uuid",
	DeviceTree:  "/sys/firmware/devicetree/base/ibm,partition-uuid",
	MachineID:   "/etc/machine-id",
}

// HostIdentity returns this machine's host identity the way nvme-cli and
// libnvme find it, from DefaultHostPaths (see HostIdentityFrom).
func HostIdentity() (Identity, error) { return HostIdentityFrom(DefaultHostPaths) }

// hostnqnAppID is libnvme's systemd application ID for host NQNs
// (NVME_HOSTNQN_ID c7f46181-12be-4932-8c83-106f9dddd86b).
var hostnqnAppID = [16]byte{0xc7, 0xf4, 0x61, 0x81, 0x12, 0xbe, 0x49, 0x32, 0x8c, 0x83, 0x10, 0x6f, 0x9d, 0xdd, 0xd8, 0x6b}

// HostIdentityFrom returns the host identity following libnvme
// (nvmf_host_get_ids / nvmf_generate_hostid):
//
//  1. The host NQN file and the host ID file, first line of each, trimmed.
//     If only the NQN exists and it is of the UUID form, the ID is its UUID;
//     if only the ID exists, the NQN is nvmeof.UUIDNQN(ID).
//  2. Otherwise a stable UUID of the machine: the DMI product UUID (readable
//     by root only), else the device-tree partition UUID, else a UUID
//     derived from /etc/machine-id as systemd's
//     sd_id128_get_machine_app_specific does with libnvme's application ID
//     (HMAC-SHA256 keyed by the machine ID, made a version 4 UUID; what
//     libnvme 1.x built with systemd generated).
//  3. Otherwise a random UUID (not stable: persist it with
//     WriteHostIdentity).
//
// With a generated UUID the NQN is nvmeof.UUIDNQN(uuid) and the ID the same UUID.
// Files that cannot be read are skipped; malformed ones are errors.
func HostIdentityFrom(p HostPaths) (Identity, error) {
	nqn, err := readFirstLine(p.HostNQN)
	if err != nil {
		return Identity{}, err
	}
	idStr, err := readFirstLine(p.HostID)
	if err != nil {
		return Identity{}, err
	}
	if nqn != "" {
		if err := nvmeof.ValidateNQN(nqn); err != nil {
			return Identity{}, fmt.Errorf("initiator: host NQN file %s: %w", p.HostNQN, err)
		}
	}
	switch {
	case nqn != "" && idStr != "":
		id, err := nvmeof.ParseUUID(idStr)
		if err != nil {
			return Identity{}, fmt.Errorf("initiator: host ID file %s: %w", p.HostID, err)
		}
		return Identity{NQN: nqn, ID: id, Source: "file"}, nil
	case idStr != "":
		id, err := nvmeof.ParseUUID(idStr)
		if err != nil {
			return Identity{}, fmt.Errorf("initiator: host ID file %s: %w", p.HostID, err)
		}
		return Identity{NQN: nvmeof.UUIDNQN(id), ID: id, Source: "file+derived"}, nil
	}
	if nqn != "" {
		if u, ok := nvmeof.UUIDFromNQN(nqn); ok {
			return Identity{NQN: nqn, ID: u, Source: "file+derived"}, nil
		}
	}
	id, src, err := machineUUID(p)
	if err != nil {
		return Identity{}, err
	}
	if nqn != "" {
		return Identity{NQN: nqn, ID: id, Source: "file+" + src}, nil
	}
	return Identity{NQN: nvmeof.UUIDNQN(id), ID: id, Source: src}, nil
}

// machineUUID returns a stable UUID for this machine and where it came from.
func machineUUID(p HostPaths) ([16]byte, string, error) {
	if s, _ := readFirstLine(p.ProductUUID); s != "" {
		// libnvme takes the line as is (the kernel already byte-swapped it).
		if id, err := nvmeof.ParseUUID(s); err == nil && !allBytes(id, 0) && !allBytes(id, 0xFF) {
			return id, "dmi", nil
		}
	}
	if p.DeviceTree != "" {
		if b, err := os.ReadFile(p.DeviceTree); err == nil {
			s := strings.TrimSpace(string(bytes.TrimRight(b, "\x00")))
			if id, err := nvmeof.ParseUUID(s); err == nil {
				return id, "device-tree", nil
			}
		}
	}
	if s, _ := readFirstLine(p.MachineID); s != "" {
		if mid, err := hex.DecodeString(s); err == nil && len(mid) == 16 {
			return appSpecificUUID([16]byte(mid), hostnqnAppID), "machine-id", nil
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return id, "", fmt.Errorf("initiator: host identity: %w", err)
	}
	id[6] = id[6]&0x0F | 0x40
	id[8] = id[8]&0x3F | 0x80
	return id, "random", nil
}

// appSpecificUUID derives an application specific ID from a machine ID the
// way systemd's sd_id128_get_app_specific does: HMAC-SHA256 with the machine
// ID as key over the application ID, first 16 bytes, as a version 4 UUID.
func appSpecificUUID(machineID, appID [16]byte) [16]byte {
	m := hmac.New(sha256.New, machineID[:])
	m.Write(appID[:])
	var id [16]byte
	copy(id[:], m.Sum(nil))
	id[6] = id[6]&0x0F | 0x40
	id[8] = id[8]&0x3F | 0x80
	return id
}

func allBytes(id [16]byte, v byte) bool {
	for _, c := range id {
		if c != v {
			return false
		}
	}
	return true
}

// readFirstLine returns the first line of the file at path, trimmed, or ""
// if path is empty or the file does not exist or cannot be read.
func readFirstLine(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return "", nil
		}
		return "", fmt.Errorf("initiator: host identity: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}

// PersistentHostIdentity returns this machine's host identity as
// HostIdentityFrom does and, when neither p.HostNQN nor p.HostID exists,
// saves the identity it derived to both (as nvme-cli's packaging and
// nvmf-autoconnect do on first use), so that the host NQN stays the same
// from now on, whatever installs or derives one later (nvme-cli writes a
// random one when it finds none; allowed_hosts lists and DH-HMAC-CHAP
// keys are bound to the NQN).
//
// An existing file is never replaced: each file is written to a temporary
// file in its directory and linked into place (link(2) fails if the name
// exists), so two first uses at once agree on the winner's identity, which
// is then read back. Saving needs write access to the directories (root
// for /etc/nvme); without it the derived identity is returned unsaved, and
// Persisted says why. Only an identity that cannot be determined is an
// error.
func PersistentHostIdentity(p HostPaths) (Identity, error) {
	id, err := HostIdentityFrom(p)
	if err != nil || strings.HasPrefix(id.Source, "file") {
		return id, err
	}
	if p.HostNQN == "" || p.HostID == "" {
		id.Persisted = "not saved: no path for the host NQN or the host ID file"
		return id, nil
	}
	for _, f := range []string{p.HostNQN, p.HostID} {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			// It exists now: another first use saved its identity since
			// we read (each file appears whole: linked), so read again.
			// If it still cannot be read, it is not ours to replace.
			again, err := HostIdentityFrom(p)
			if err != nil || strings.HasPrefix(again.Source, "file") {
				return again, err
			}
			id.Persisted = fmt.Sprintf("not saved: %s exists but cannot be read", f)
			return id, nil
		}
	}
	for _, w := range []struct{ path, content string }{
		{p.HostNQN, id.NQN + "\n"},
		{p.HostID, nvmeof.FormatUUID(id.ID) + "\n"},
	} {
		err := createFileExclusive(w.path, w.content)
		if errors.Is(err, fs.ErrExist) {
			// Another first use saved its identity meanwhile: take it.
			return HostIdentityFrom(p)
		}
		if err != nil {
			id.Persisted = "not saved: " + err.Error()
			return id, nil
		}
	}
	id.Persisted = fmt.Sprintf("saved to %s and %s", p.HostNQN, p.HostID)
	return id, nil
}

// createFileExclusive creates path with content, mode 0644, unless it
// exists (fs.ErrExist): written and synced under a temporary name in the
// same directory, then linked to path, so that path is either absent or
// complete, and never replaced.
func createFileExclusive(path, content string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Link(tmp, path); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) && errors.Is(le.Err, fs.ErrExist) {
			return fs.ErrExist
		}
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// GenerateHostIdentity returns a new host identity from this machine's
// stable UUID (or a random one), ignoring existing host NQN and ID files,
// like `nvme gen-hostnqn` (which prints the NQN).
func GenerateHostIdentity(p HostPaths) (Identity, error) {
	p.HostNQN, p.HostID = "", ""
	return HostIdentityFrom(p)
}

// WriteHostIdentity writes id to p.HostNQN and p.HostID (one line each,
// mode 0644, creating the directories), replacing each file atomically.
func WriteHostIdentity(p HostPaths, id Identity) error {
	if err := nvmeof.ValidateNQN(id.NQN); err != nil {
		return err
	}
	if err := writeFileAtomic(p.HostNQN, id.NQN+"\n"); err != nil {
		return err
	}
	return writeFileAtomic(p.HostID, nvmeof.FormatUUID(id.ID)+"\n")
}

func writeFileAtomic(path, content string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("initiator: write host identity: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("initiator: write host identity: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("initiator: write host identity %s: %w", path, err)
	}
	return nil
}
