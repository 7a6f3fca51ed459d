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

func truncated(what string, have, need int) error {
	return fmt.Errorf("nvmeof: %s: %d bytes, need %d: %w", what, have, need, ErrTruncated)
}

func malformed(what, format string, args ...any) error {
	return fmt.Errorf("nvmeof: %s: %s: %w", what, fmt.Sprintf(format, args...), ErrMalformed)
}
