package initiator

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// controller, queue and watcher must be gone when its test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
