package nvmeof

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNQN(t *testing.T) {
	for _, ok := range []string{
		DiscoveryNQN,
		labHostNQN,
		labSubNQN,
		"nqn.2016-06.io.spdk:cnode1",
		"nqn.1992-08.com.netapp:sn.0123456789abcdef:subsystem.x",
		"nqn.2014-08.org.nvmexpress:uuid:6E766D65-6F66-4C61-9B00-000000000001",
		"nqn.2024-12.localhost",
		"nqn.2024-01.io.example:" + strings.Repeat("é", 50), // UTF-8 user part
		"nqn.2024-01.io.x:" + strings.Repeat("a", NQNMaxLen-len("nqn.2024-01.io.x:")),
	} {
		if err := ValidateNQN(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"",
		"nqn.2024-01.io.x:" + strings.Repeat("a", NQNMaxLen-len("nqn.2024-01.io.x:")+1),
		"iqn.2024-01.io.example:a",
		"nqn.24-01.io.example:a",
		"nqn.2024-13.io.example:a",
		"nqn.2024-00.io.example:a",
		"nqn.2024-1.io.example:a",
		"nqn.2024-01:a",
		"nqn.2024-01.:a",
		"nqn.2024-01.io..example:a",
		"nqn.2024-01.io_x.example:a",
		"nqn.2024-01.io.example:a\x00b",
		"nqn.2024-01.io.example:\x7f",
		"nqn.2024-01.io.example:\xff",
		"nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-00000000000",
		"nqn.2014-08.org.nvmexpress:uuid:6e766d65x6f66-4c61-9b00-000000000001",
		"nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-00000000000g",
	} {
		if err := ValidateNQN(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q accepted (%v)", bad, err)
		}
	}
	if !IsDiscoveryNQN(DiscoveryNQN) || IsDiscoveryNQN(labSubNQN) {
		t.Error("IsDiscoveryNQN")
	}
}

func TestUUID(t *testing.T) {
	id, err := ParseUUID("6E766D65-6f66-4c61-9b00-000000000001")
	if err != nil || id != [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x6f, 0x66, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0, 1} {
		t.Fatalf("%x %v", id, err)
	}
	if FormatUUID(id) != labHostUUID || UUIDNQN(id) != labHostNQN {
		t.Error("format")
	}
	if got, ok := UUIDFromNQN(labHostNQN); !ok || got != id {
		t.Error("UUIDFromNQN")
	}
	if _, ok := UUIDFromNQN(labSubNQN); ok {
		t.Error("UUIDFromNQN on a non-UUID NQN")
	}
}

func FuzzNQN(f *testing.F) {
	for _, s := range []string{DiscoveryNQN, labHostNQN, labSubNQN, "nqn.2024-13.x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateNQN(s)
		if err == nil {
			if len(s) > NQNMaxLen || !strings.HasPrefix(s, "nqn.") {
				t.Fatalf("%q accepted", s)
			}
			// A valid NQN survives the Connect data field.
			var d ConnectData
			d.SetSubNQN(s)
			d.SetHostNQN(s)
			if d.Validate() != nil || d.SubNQN() != s {
				t.Fatalf("%q does not round-trip through connect data", s)
			}
		}
		if id, ok := UUIDFromNQN(s); ok && UUIDNQN(id) != strings.ToLower(s) {
			t.Fatalf("UUID NQN round trip %q", s)
		}
	})
}

func TestParseUUIDMisplacedDash(t *testing.T) {
	// Found by FuzzNQN: a dash inside a group used to shift the hex pairs
	// past the end of the string.
	for _, s := range []string{
		"6e766d65-6f66-4c61-9b00-0000000000-1",
		"6e766d65-6f66-4c61-9b00-00000000000-",
		"-e766d65-6f66-4c61-9b00-000000000001",
	} {
		if _, err := ParseUUID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", s, err)
		}
	}
}
