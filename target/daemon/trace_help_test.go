package daemon

import (
	"bytes"
	"strings"
	"testing"
)

// TestTraceHelp (issue 23.11): `nvmetd trace --help` prints its usage and
// exits 0 (it exited 2: "--help" is not start, stop or status), and
// `nvmetd --help` names the trace command.
func TestTraceHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errb bytes.Buffer
		if rc := runTrace([]string{arg}, &out, &errb); rc != exitOK {
			t.Errorf("nvmetd trace %s: exit %d\n%s", arg, rc, errb.String())
		}
		if !strings.Contains(errb.String(), "usage: nvmetd trace start") || !strings.Contains(errb.String(), "--max-size") {
			t.Errorf("nvmetd trace %s: stderr\n%s", arg, errb.String())
		}
	}
	var help bytes.Buffer
	if rc := run([]string{"--help"}, &help, &help); rc != exitOK || !strings.Contains(help.String(), "nvmetd trace start|stop|status") {
		t.Errorf("nvmetd --help: exit %d, no trace command:\n%s", rc, help.String())
	}
	var out, errb bytes.Buffer
	if rc := runTrace(nil, &out, &errb); rc != exitUsage || !strings.Contains(errb.String(), "usage: nvmetd trace") {
		t.Errorf("nvmetd trace (no action): exit %d\n%s", rc, errb.String())
	}
}
