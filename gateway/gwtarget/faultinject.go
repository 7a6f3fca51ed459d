//go:build faultinject

package gwtarget

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The test-only fault injector (issue 21, path 4: "a failed ANA change
// does not stop the hand-over"). In a real process the holder's step-down
// (applier.SetANA(group, false): target.Target.SetGroupANA inaccessible)
// cannot fail: it reloads nothing and reads no file. To exercise the
// gateway machine's handling of a failed step-down against the real
// binary, a build with the faultinject tag makes it fail on demand. A
// production build never has it: faultinject_off.go is the no-op the
// build without the tag compiles.
//
// NVMETD_FAULT_STEPDOWN names a file (read at each step-down, so that a
// test arms it on a running process): while it holds a count N > 0, the
// step-down of a group this gateway serves optimized fails, the ports stay
// as they are, and N is written back less one. Without the variable, the
// file, or with N ≤ 0 nothing is changed.

// faultInjectBuild says that this build injects faults.
const faultInjectBuild = true

// faultStepDownEnv is the variable that names the fault's file.
const faultStepDownEnv = "NVMETD_FAULT_STEPDOWN"

var faultMu sync.Mutex

// stepDownFault returns the injected failure of the step-down of group
// (nil: none armed).
func stepDownFault(group uint32) error {
	path := os.Getenv(faultStepDownEnv)
	if path == "" {
		return nil
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(n-1)+"\n"), 0o644); err != nil {
		return fmt.Errorf("fault injector: %w", err)
	}
	return fmt.Errorf("fault injected (%s=%s): the step-down of ANA group %d refused (%d more armed)", faultStepDownEnv, path, group, n-1)
}

// faultInjectorNote says that this build injects faults (logged at the
// gateway's start).
func faultInjectorNote() string {
	if p := os.Getenv(faultStepDownEnv); p != "" {
		return "TEST BUILD (faultinject): step-downs fail as armed in " + p
	}
	return "TEST BUILD (faultinject): no fault armed (" + faultStepDownEnv + " unset)"
}
