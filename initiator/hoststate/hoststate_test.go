package hoststate

import (
	"os"
	"sync"
	"testing"
)

// TestWriteStateConcurrent: the daemon's start and its controller events
// save state at the same time; no save may rename another's file away
// (seen in CI: "rename .state.json.tmp state.json: no such file").
func TestWriteStateConcurrent(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := os.Mkdir(s.InstanceDir("nvme0"), 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 800)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				errs <- s.Write(&Controller{Device: "nvme0", PID: g*1000 + i})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Read("nvme0"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(s.InstanceDir("nvme0"))
	if len(ents) != 1 {
		t.Fatalf("instance directory holds %d files, want state.json alone", len(ents))
	}
}
