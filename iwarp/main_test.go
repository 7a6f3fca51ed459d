package iwarp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// QP, listener and timer must be gone when its test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
