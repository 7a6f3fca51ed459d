package interop_test

import (
	"errors"
	"testing"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// TestRpingEnd: a normal end passes; rping's teardown race passes only with
// status 255 or 0, its normal stderr and the one closed-channel line last;
// anything else fails.
func TestRpingEnd(t *testing.T) {
	const normal = "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"
	race := normal + "rdma_get_cm_event: Bad file descriptor\n"
	for _, c := range []struct {
		name   string
		err    error
		stderr string
		ok     bool
	}{
		{"normal end", nil, normal, true},
		{"nothing on stderr", nil, "", true},
		{"race, cm_thread's exit first", &lab.ExecError{ExitCode: 255}, race, true},
		{"race, main's exit first", nil, race, true},
		{"other status", &lab.ExecError{ExitCode: 1}, race, false},
		{"did not finish", &lab.ExecError{ExitCode: 255, Err: errors.New("deadline")}, race, false},
		{"not a guest command", errors.New("exit status 255"), race, false},
		{"255 without the line", &lab.ExecError{ExitCode: 255}, normal, false},
		{"line alone", &lab.ExecError{ExitCode: 255}, "rdma_get_cm_event: Bad file descriptor", false},
		{"line alone, status 0", nil, "rdma_get_cm_event: Bad file descriptor", false},
		{"another error too", &lab.ExecError{ExitCode: 255}, "cq completion failed status 5\n" + race, false},
		{"another error too, status 0", nil, "cq completion failed status 5\n" + race, false},
		{"line not last", &lab.ExecError{ExitCode: 255}, race + "client DISCONNECT EVENT...\n", false},
		{"line not last, status 0", nil, race + "client DISCONNECT EVENT...\n", false},
		{"error, status 0", nil, normal + "cq completion failed status 5\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkRpingEnd(t, c.err, c.stderr)
			if (err == nil) != c.ok {
				t.Errorf("checkRpingEnd = %v, want ok %v", err, c.ok)
			}
		})
	}
}
