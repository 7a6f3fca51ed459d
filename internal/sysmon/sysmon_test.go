package sysmon

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain doubles as the program KeepAwake re-executes: with
// SYSMON_TEST_CHILD set it calls KeepAwake and prints what it runs with.
func TestMain(m *testing.M) {
	if os.Getenv("SYSMON_TEST_CHILD") == "1" {
		KeepAwake()
		fmt.Printf("pid=%d GODEBUG=%s\n", os.Getpid(), os.Getenv("GODEBUG"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestKeepAwake(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"added", nil, "GODEBUG=schedtrace=" + Period},
		{"appended", []string{"GODEBUG=madvdontneed=1"}, "GODEBUG=madvdontneed=1,schedtrace=" + Period},
		{"schedtrace kept", []string{"GODEBUG=schedtrace=0"}, "GODEBUG=schedtrace=0"},
		{"turned off", []string{Env + "=sleep"}, "GODEBUG="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			env := []string{"SYSMON_TEST_CHILD=1"}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, Env+"=") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, tc.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			line := strings.TrimSpace(string(out))
			if !strings.HasSuffix(line, " "+tc.want) {
				t.Fatalf("child printed %q, want GODEBUG %q", line, tc.want)
			}
			// The same process (execve keeps the PID).
			if !strings.HasPrefix(line, fmt.Sprintf("pid=%d ", cmd.Process.Pid)) {
				t.Fatalf("child printed %q, started as PID %d", line, cmd.Process.Pid)
			}
		})
	}
}
