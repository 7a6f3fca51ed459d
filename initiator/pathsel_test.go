package initiator

import (
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestSelectPath: path selection as drivers/nvme/host/multipath.c chooses
// (__nvme_find_path, nvme_round_robin_path, nvme_queue_depth_path), with
// every NUMA distance equal.
func TestSelectPath(t *testing.T) {
	const (
		opt  = nvmeof.ANAOptimized
		non  = nvmeof.ANANonOptimized
		inac = nvmeof.ANAInaccessible
		loss = nvmeof.ANAPersistentLoss
		chg  = nvmeof.ANAChange
	)
	up := func(st nvmeof.ANAState, depth int32) pathView { return pathView{usable: true, state: st, depth: depth} }
	down := func(st nvmeof.ANAState) pathView { return pathView{state: st} }
	for _, tc := range []struct {
		name   string
		policy IOPolicy
		paths  []pathView
		cur    int
		want   int
	}{
		{"numa: no paths", IOPolicyNUMA, nil, -1, -1},
		{"numa: first optimized", IOPolicyNUMA, []pathView{up(non, 0), up(opt, 0), up(opt, 0)}, -1, 1},
		{"numa: keeps an optimized current path", IOPolicyNUMA, []pathView{up(opt, 0), up(opt, 0)}, 1, 1},
		{"numa: leaves a non-optimized current path for an optimized one", IOPolicyNUMA, []pathView{up(opt, 0), up(non, 0)}, 1, 0},
		{"numa: non-optimized when nothing is optimized", IOPolicyNUMA, []pathView{up(inac, 0), up(non, 0)}, -1, 1},
		{"numa: never inaccessible, persistent loss or change", IOPolicyNUMA, []pathView{up(inac, 0), up(loss, 0), up(chg, 0)}, -1, -1},
		{"numa: not a controller that is down", IOPolicyNUMA, []pathView{down(opt), up(non, 0)}, 0, 1},
		{"numa: current path out of range", IOPolicyNUMA, []pathView{up(opt, 0)}, 3, 0},

		{"rr: next optimized after current", IOPolicyRoundRobin, []pathView{up(opt, 0), up(opt, 0), up(opt, 0)}, 0, 1},
		{"rr: wraps", IOPolicyRoundRobin, []pathView{up(opt, 0), up(opt, 0), up(opt, 0)}, 2, 0},
		{"rr: skips non-optimized for optimized", IOPolicyRoundRobin, []pathView{up(opt, 0), up(non, 0), up(opt, 0)}, 0, 2},
		{"rr: stays on the only optimized path", IOPolicyRoundRobin, []pathView{up(opt, 0), up(non, 0)}, 0, 0},
		{"rr: non-optimized current path, another non-optimized", IOPolicyRoundRobin, []pathView{up(non, 0), up(non, 0)}, 0, 1},
		{"rr: non-optimized current path alone", IOPolicyRoundRobin, []pathView{up(non, 0), up(inac, 0)}, 0, 0},
		{"rr: current path down", IOPolicyRoundRobin, []pathView{down(opt), up(non, 0)}, 0, 1},
		{"rr: nothing usable", IOPolicyRoundRobin, []pathView{up(inac, 0), down(opt)}, 0, -1},
		{"rr: no current path", IOPolicyRoundRobin, []pathView{up(non, 0), up(opt, 0)}, -1, 1},
		{"rr: last non-optimized found (as Linux)", IOPolicyRoundRobin, []pathView{up(inac, 0), up(non, 0), up(non, 0)}, 0, 2},

		{"qd: least busy optimized", IOPolicyQueueDepth, []pathView{up(opt, 5), up(opt, 2), up(non, 0)}, 0, 1},
		{"qd: optimized before an idle non-optimized", IOPolicyQueueDepth, []pathView{up(non, 0), up(opt, 9)}, -1, 1},
		{"qd: least busy non-optimized", IOPolicyQueueDepth, []pathView{up(non, 3), up(non, 1), up(inac, 0)}, -1, 1},
		{"qd: ties go to the first", IOPolicyQueueDepth, []pathView{up(opt, 1), up(opt, 1)}, 1, 0},
		{"qd: nothing usable", IOPolicyQueueDepth, []pathView{down(opt), up(chg, 0)}, -1, -1},
	} {
		if got := selectPath(tc.policy, tc.paths, tc.cur); got != tc.want {
			t.Errorf("%s: path %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestParseIOPolicy: the names nvme-cli and sysfs use, and nothing else.
func TestParseIOPolicy(t *testing.T) {
	for _, p := range []IOPolicy{IOPolicyNUMA, IOPolicyRoundRobin, IOPolicyQueueDepth} {
		if got, err := ParseIOPolicy(p.String()); err != nil || got != p {
			t.Errorf("%v: %v %v", p, got, err)
		}
	}
	if _, err := ParseIOPolicy("round_robin"); err == nil {
		t.Error("round_robin accepted")
	}
}
