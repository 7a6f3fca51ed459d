package gateway_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
)

func TestVersionEncoding(t *testing.T) {
	for _, v := range []uint64{1, 2, 42, 1<<64 - 1} {
		b := gateway.EncodeVersion(v)
		if len(b) != 20 {
			t.Fatalf("%d: %q is not 20 bytes", v, b)
		}
		got, err := gateway.DecodeVersion(b)
		if err != nil || got != v {
			t.Fatalf("%d: decoded %d, %v", v, got, err)
		}
	}
	if v, err := gateway.DecodeVersion(nil); v != 0 || err != nil {
		t.Fatalf("no data: %d %v", v, err)
	}
	for _, bad := range []string{"7", "0000000000000000000x", "000000000000000000070"} {
		if _, err := gateway.DecodeVersion([]byte(bad)); err == nil {
			t.Fatalf("%q decoded", bad)
		}
	}
	err := fmt.Errorf("wrapped: %w", &gateway.VersionConflictError{Base: 2, Current: 3})
	var vc *gateway.VersionConflictError
	if !errors.Is(err, gateway.ErrVersionConflict) || !errors.As(err, &vc) || vc.Current != 3 {
		t.Fatalf("%v", err)
	}
}

func TestParseRunning(t *testing.T) {
	got := gateway.ParseRunning(map[string][]byte{"running.gw-a": []byte("3"), "running.gw-b": []byte("x"), "member.gw-a": []byte("1")})
	if len(got) != 1 || got["gw-a"] != 3 {
		t.Fatalf("%v", got)
	}
}

// TestCNTLIDConflicts: each member's range on a subsystem is its own for
// that subsystem, else its default (cntlid *), else every CNTLID; two
// members whose ranges overlap on a subsystem of the change conflict.
func TestCNTLIDConflicts(t *testing.T) {
	const s1, s2 = "nqn.2024-01.io.nvmetd:s1", "nqn.2024-01.io.nvmetd:s2"
	a := gateway.Member{Name: "a", CNTLIDs: map[string][2]uint16{s1: {1, 100}, gateway.DefaultCNTLIDKey: {1001, 2000}}}
	b := gateway.Member{Name: "b", CNTLIDs: map[string][2]uint16{s1: {101, 200}, gateway.DefaultCNTLIDKey: {2001, 3000}}}
	c := gateway.Member{Name: "c", CNTLIDs: map[string][2]uint16{s1: {201, 300}}}
	if got := gateway.CNTLIDConflicts([]string{s1, s2}, []gateway.Member{b, a}); len(got) != 0 {
		t.Fatalf("disjoint: %v", got)
	}
	got := gateway.CNTLIDConflicts([]string{s2, s1, s2}, []gateway.Member{c, b, a})
	want := []string{"subsystem " + s2 + ": cntlid 1001-2000 of gateway a overlaps 1-65519 of gateway c",
		"subsystem " + s2 + ": cntlid 2001-3000 of gateway b overlaps 1-65519 of gateway c"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("line %d: %q, want %q…", i, got[i], want[i])
		}
	}
	// The default survives the member entry's encoding.
	m, err := gateway.ParseMember("a", a.Encode())
	if err != nil || m.Range(s2) != [2]uint16{1001, 2000} || !slices.Contains(strings.Split(a.Encode(), "\n"), "cntlid * 1001-2000") {
		t.Fatalf("%+v %v %q", m, err, a.Encode())
	}
}
