package auth

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"testing"
)

// mustController is NewController for configurations known to be valid.
func mustController(t testing.TB, cfg ControllerConfig) *Controller {
	t.Helper()
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// detReader returns a deterministic stream of bytes for a label, so that
// every test's challenges, sequence numbers and DH keys are reproducible.
func detReader(label string) io.Reader {
	return rand.NewChaCha8(sha256.Sum256([]byte(label)))
}

// failingReader fails every read, for the error paths of randomness.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
