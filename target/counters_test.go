package target

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestCountersSurviveReopen (issue 23.13): a reload that reopens a
// namespace (here: a changed setting of the same file) keeps its SMART /
// Health counters and its status counters; before, they restarted at 0.
func TestCountersSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns1.img")
	cfg := testConfig(t, fileNS(1, path, "4MiB"))
	s := startServer(t, cfg)
	a := mustConnect(t, portAddr(s, 1), testSubNQN)
	a.setup(1)
	data := pattern(4096, 3)
	for i := range 3 {
		if err := do(t, a.io[0], rw(true, 1, uint64(8*i), data, 512)); err != nil {
			t.Fatal(err)
		}
	}
	writes := func() (status uint64, smart uint64) {
		t.Helper()
		for _, sub := range s.status().Subsystems {
			for _, ns := range sub.Namespaces {
				if sub.NQN == testSubNQN && ns.NSID == 1 {
					status = ns.IO.WriteCommands
				}
			}
		}
		b, err := a.getLog(nvmeof.LIDSMART, 1, 0, 512)
		if err != nil {
			t.Fatal(err)
		}
		// SMART log: Host Write Commands, bytes 95:80 (NVMe Base 2.0 Figure 207).
		return status, binary.LittleEndian.Uint64(b[80:])
	}
	if st, sm := writes(); st != 3 || sm != 3 {
		t.Fatalf("before the reload: %d writes in status, %d in the SMART log", st, sm)
	}
	cfg.Subsystems[0].Namespaces[0].Backend.Size = "8MiB" // reopens NSID 1
	reload(t, s, cfg)
	if st, sm := writes(); st != 3 || sm != 3 {
		t.Fatalf("after a reload that reopened the namespace: %d writes in status, %d in the SMART log (want 3: counters restarted)", st, sm)
	}
	if err := do(t, a.io[0], rw(true, 1, 64, data, 512)); err != nil {
		t.Fatal(err)
	}
	if st, sm := writes(); st != 4 || sm != 4 {
		t.Fatalf("after one more write: %d in status, %d in the SMART log", st, sm)
	}
}
