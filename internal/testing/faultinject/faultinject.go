// Package faultinject arms the test-only fault injector of nvmetd builds
// made with the build tag Tag (gateway/gwtarget/faultinject.go; a
// production build has no injector: the hook is a no-op there). A process
// started with StepDownEnv naming a file refuses the step-down (ANA
// inaccessible) of a group it serves optimized while that file holds a
// count above zero, and counts it down: a test arms it on a running
// gateway (ArmStepDown) and sees how many refusals are left
// (StepDownLeft).
package faultinject

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

const (
	// Tag is the build tag of a fault-injecting nvmetd.
	Tag = "faultinject"
	// StepDownEnv names the step-down fault's file (as
	// gateway/gwtarget/faultinject.go reads it).
	StepDownEnv = "NVMETD_FAULT_STEPDOWN"
)

// ArmStepDown makes the next n step-downs of the process whose StepDownEnv
// is path fail (0 disarms). The file is written whole and renamed in, so
// that the process never reads half of it.
func ArmStepDown(path string, n int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		return fmt.Errorf("arm the step-down fault: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("arm the step-down fault: %w", err)
	}
	return nil
}

// StepDownLeft returns the refusals still armed in path.
func StepDownLeft(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("step-down fault file %s: %w", path, err)
	}
	return n, nil
}
