package interop_test

import (
	"errors"
	"testing"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// TestRpingTeardownRace: only rping's exit 255 with its normal stderr and
// the one closed-channel line is taken for its teardown race.
func TestRpingTeardownRace(t *testing.T) {
	const normal = "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"
	race := normal + "rdma_get_cm_event: Bad file descriptor\n"
	for _, c := range []struct {
		name   string
		err    error
		stderr string
		want   bool
	}{
		{"race", &lab.ExecError{ExitCode: 255}, race, true},
		{"other status", &lab.ExecError{ExitCode: 1}, race, false},
		{"did not finish", &lab.ExecError{ExitCode: 255, Err: errors.New("deadline")}, race, false},
		{"not a guest command", errors.New("exit status 255"), race, false},
		{"without the line", &lab.ExecError{ExitCode: 255}, normal, false},
		{"line alone", &lab.ExecError{ExitCode: 255}, "rdma_get_cm_event: Bad file descriptor", false},
		{"another error too", &lab.ExecError{ExitCode: 255}, "cq completion failed status 5\n" + race, false},
		{"line not last", &lab.ExecError{ExitCode: 255}, race + "client DISCONNECT EVENT...\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := rpingTeardownRace(t, c.err, c.stderr); got != c.want {
				t.Errorf("rpingTeardownRace = %v, want %v", got, c.want)
			}
		})
	}
}
