package nvmeof

import (
	"errors"
	"fmt"
)

// ErrTruncated is wrapped by the errors of decoders given fewer bytes than
// the structure they decode needs.
var ErrTruncated = errors.New("truncated")

// ErrMalformed is wrapped by the errors of decoders given bytes that do not
// form a valid structure (bad lengths, counts, terminators or values).
var ErrMalformed = errors.New("malformed")

// ErrAuthNotSupported is the error for the NVMe-oF in-band authentication
// commands (Authentication Send/Receive) and for a Connect response that asks
// for authentication (ATR/ASCR): nvmetd does not implement DH-HMAC-CHAP. It
// wraps StatusInvalidOpcode|StatusDNR, the answer of an nvmet built without
// CONFIG_NVME_TARGET_AUTH ("received unknown capsule type"), so a target can
// complete Auth Send/Receive with StatusFromError(ErrAuthNotSupported).
var ErrAuthNotSupported = fmt.Errorf("nvmeof: in-band authentication (DH-HMAC-CHAP) is not supported: %w",
	StatusInvalidOpcode|StatusDNR)

func truncated(what string, have, need int) error {
	return fmt.Errorf("nvmeof: %s: %d bytes, need %d: %w", what, have, need, ErrTruncated)
}

func malformed(what, format string, args ...any) error {
	return fmt.Errorf("nvmeof: %s: %s: %w", what, fmt.Sprintf(format, args...), ErrMalformed)
}
