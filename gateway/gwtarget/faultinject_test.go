package gwtarget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStepDownFault: armed with 2, a build with the faultinject tag
// refuses two step-downs and counts the file down to 0; a production
// build (no tag) refuses none and leaves the file alone, whatever the
// environment says.
func TestStepDownFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stepdown.fault")
	if err := os.WriteFile(path, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NVMETD_FAULT_STEPDOWN", path)
	var refused int
	for range 4 {
		if err := stepDownFault(1); err != nil {
			if !strings.Contains(err.Error(), "fault injected") {
				t.Errorf("refusal %v does not say it is injected", err)
			}
			refused++
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	left := strings.TrimSpace(string(b))
	note := faultInjectorNote()
	if faultInjectBuild {
		if refused != 2 || left != "0" || !strings.Contains(note, "TEST BUILD") {
			t.Errorf("faultinject build: %d refused, %q left, note %q; want 2, 0 and a TEST BUILD note", refused, left, note)
		}
		return
	}
	if refused != 0 || left != "2" || note != "" {
		t.Errorf("production build: %d refused, %q left, note %q; want 0, 2 and none", refused, left, note)
	}
}
