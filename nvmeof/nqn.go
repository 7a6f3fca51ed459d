package nvmeof

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// DiscoveryNQN is the well-known NQN of discovery subsystems (NVMe Base 2.0
// §4.5; Linux NVME_DISC_SUBSYS_NAME).
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// UUIDNQNPrefix starts the NQNs of the UUID form
// "nqn.2014-08.org.nvmexpress:uuid:<uuid>" (NVMe Base 2.0 §4.5), which
// nvme-cli generates as host NQNs.
const UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// ValidateNQN checks that s is an NVMe Qualified Name (NVMe Base 2.0 §4.5):
// at most 223 bytes of UTF-8 without control characters, starting with "nqn."
// and either of the UUID form "nqn.2014-08.org.nvmexpress:uuid:" followed by
// a UUID in 8-4-4-4-12 hex form, or of the form
// "nqn.yyyy-mm.reverse.domain[:string]", where yyyy-mm is the year and month
// the naming authority owned the domain and the domain labels are letters,
// digits and hyphens. The discovery NQN is valid.
func ValidateNQN(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("nvmeof: NQN is empty: %w", ErrMalformed)
	}
	if len(s) > NQNMaxLen {
		return fmt.Errorf("nvmeof: NQN is %d bytes, longer than %d: %w", len(s), NQNMaxLen, ErrMalformed)
	}
	if err := checkNQNChars([]byte(s)); err != nil {
		return fmt.Errorf("nvmeof: NQN %q %v: %w", s, err, ErrMalformed)
	}
	if !strings.HasPrefix(s, "nqn.") {
		return fmt.Errorf("nvmeof: NQN %q does not start with \"nqn.\": %w", s, ErrMalformed)
	}
	if strings.HasPrefix(s, UUIDNQNPrefix) {
		if _, err := ParseUUID(s[len(UUIDNQNPrefix):]); err != nil {
			return fmt.Errorf("nvmeof: NQN %q: %w", s, err)
		}
		return nil
	}
	rest := s[len("nqn."):]
	// yyyy-mm.
	if len(rest) < 8 || !isDigits(rest[0:4]) || rest[4] != '-' || !isDigits(rest[5:7]) || rest[7] != '.' {
		return fmt.Errorf("nvmeof: NQN %q: want nqn.yyyy-mm.domain: %w", s, ErrMalformed)
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return fmt.Errorf("nvmeof: NQN %q: month %s out of range: %w", s, rest[5:7], ErrMalformed)
	}
	domain, _, _ := strings.Cut(rest[8:], ":")
	if domain == "" {
		return fmt.Errorf("nvmeof: NQN %q: empty domain: %w", s, ErrMalformed)
	}
	for _, label := range strings.Split(domain, ".") {
		if label == "" {
			return fmt.Errorf("nvmeof: NQN %q: empty domain label: %w", s, ErrMalformed)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("nvmeof: NQN %q: invalid character %q in domain: %w", s, c, ErrMalformed)
			}
		}
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// IsDiscoveryNQN reports whether nqn is the well-known discovery NQN.
func IsDiscoveryNQN(nqn string) bool { return nqn == DiscoveryNQN }

// UUIDNQN returns the NQN of the UUID form for id:
// "nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func UUIDNQN(id [16]byte) string { return UUIDNQNPrefix + FormatUUID(id) }

// UUIDFromNQN returns the UUID of an NQN of the UUID form.
func UUIDFromNQN(nqn string) ([16]byte, bool) {
	if !strings.HasPrefix(nqn, UUIDNQNPrefix) {
		return [16]byte{}, false
	}
	id, err := ParseUUID(nqn[len(UUIDNQNPrefix):])
	return id, err == nil
}

// FormatUUID formats id as 36 lower-case characters in 8-4-4-4-12 form, in
// byte order (as the NVMe host ID and libnvme print it).
func FormatUUID(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], id[10:16])
	return string(b[:])
}

// ParseUUID parses a UUID in 8-4-4-4-12 hex form (either case).
func ParseUUID(s string) ([16]byte, error) {
	var id [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("nvmeof: UUID %q: want 8-4-4-4-12 hex digits: %w", s, ErrMalformed)
	}
	digits := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(id[:], []byte(digits)); err != nil {
		return id, fmt.Errorf("nvmeof: UUID %q: invalid hex digit: %w", s, ErrMalformed)
	}
	return id, nil
}
