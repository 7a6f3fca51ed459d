package target

import (
	"context"
	"testing"
)

// TestStatusWhileStarting: the daemon serves `nvmetd status` on its control
// socket while the target starts, so status must not read the registry
// (ports, subsystems) that start fills without its lock. Under -race this
// failed cmd/nvmetd's TestStatusDegraded on a loaded machine, where a status
// request came in during start.
func TestStatusWhileStarting(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"), memNS(2, "1MiB"))
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newServer(c, testLogger(t))
	started := make(chan error, 1)
	go func() { started <- s.start(context.Background()) }()
	polls := 0
	for done := false; !done; polls++ {
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
		_ = s.status()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		if err := s.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if st := s.status(); len(st.Ports) != 1 || !st.Ports[0].Listening || len(st.Subsystems) != 1 {
		t.Fatalf("status after start (%d polls during it): %+v", polls, st)
	}
}
