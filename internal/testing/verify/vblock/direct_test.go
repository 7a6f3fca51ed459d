//go:build linux

package vblock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestDirectStateSweep runs the workload as the Linux host's writer
// (test/interop/internal/vwriter) does: on a device opened with O_DIRECT,
// its record saved when it stops, loaded by another Workload and swept
// through another open of the device; a block put back at an older
// version is then found regressed, and the Summary crosses JSON.
func TestDirectStateSweep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 256*4096); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDirect(path)
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("the temporary directory's file system refuses O_DIRECT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b := d.Buffer(4096); len(b) != 4096 || uintptr(unsafe.Pointer(&b[0]))%directAlign != 0 {
		t.Fatalf("buffer of %d bytes at %p", len(b), &b[0])
	}
	w, err := Start(d, Config{Blocks: 64, Workers: 4, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, w, 1000)
	var st bytes.Buffer
	if err := w.SaveState(&st); err != nil {
		t.Fatal(err)
	}
	if g := w.Gaps(0); int64(len(g)) > w.Completions(path) || len(g) == 0 {
		t.Errorf("%d gaps of %d completions", len(g), w.Completions(path))
	}
	lw, err := LoadState(bytes.NewReader(st.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := OpenDirect(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	r := lw.Sweep(context.Background(), d2)
	if err := r.Err(); err != nil || r.Current+r.Untouched != r.Blocks || r.Current == 0 || r.Workload.Writes != w.Stats().Writes {
		t.Fatalf("%s: %v", r, err)
	}
	// Put one block back at an older version than acknowledged.
	var blk int64 = -1
	for j, a := range lw.acked {
		if a >= 2 {
			blk = int64(j)
			break
		}
	}
	if blk < 0 {
		t.Fatalf("no block written twice in %d writes", w.Stats().Writes)
	}
	old := d.Buffer(4096)
	stamp{run: lw.run, block: uint64(blk), seq: lw.acked[blk] - 1, writer: 0}.fill(old)
	if _, err := d.WriteAtContext(context.Background(), old, blk*4096); err != nil {
		t.Fatal(err)
	}
	r = lw.Sweep(context.Background(), d2)
	if r.Regressed != 1 || r.SweepErr() == nil || len(r.Bad) != 1 || r.Bad[0].Block != blk {
		t.Fatalf("a block put back at an older version: %s (%v)", r, r.SweepErr())
	}
	gaps := []Gap{{Start: time.Unix(1, 0), End: time.Unix(3, 0), From: path, To: path}}
	b, err := json.Marshal(r.Summary(gaps))
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Regressed != 1 || s.SweepErr == "" || s.Err == "" || s.Text != r.String() || len(s.Gaps) != 1 || s.Gaps[0].Duration() != 2*time.Second {
		t.Fatalf("summary after JSON: %+v", s)
	}
	// A state of another version is refused.
	if _, err := LoadState(bytes.NewReader(bytes.Replace(st.Bytes(), []byte(`"version":1`), []byte(`"version":9`), 1))); err == nil {
		t.Error("a state of version 9 loaded")
	}
}
