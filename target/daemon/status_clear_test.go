package daemon

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestStatusAfterClear is issue 23 item 9: after nvmetctl clear (DELETE
// /v1/config) the daemon serves nothing, and nvmetd status said "health:
// ok" with 0 ports and exited 0. It must be degraded (exit 3) with the
// reason.
func TestStatusAfterClear(t *testing.T) {
	md := startMgmtDaemon(t)
	status := func() (int, string) {
		var out bytes.Buffer
		c := run([]string{"status", "--socket", md.sock}, &out, io.Discard)
		return c, out.String()
	}
	if c, out := status(); c != exitOK {
		t.Fatalf("status of the serving daemon: exit %d\n%s", c, out)
	}
	if err := md.do("DELETE", "/v1/config", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	c, out := status()
	if c != exitDegraded || !strings.Contains(out, "health: DEGRADED") || !strings.Contains(out, "nothing is served: the configuration has no port") {
		t.Errorf("status after clear: exit %d, want %d (degraded) naming the reason\n%s", c, exitDegraded, out)
	}
}
