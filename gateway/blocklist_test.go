package gateway

import (
	"slices"
	"testing"
	"time"
)

// The monitor's answer to `osd blocklist ls` (format json) as 16.2.15
// gives it: the address entries, then the range entries.
const blocklistLS = `[{"addr":"192.0.2.1:0/12345","until":"2026-11-29T04:27:23.750606+0000"},` +
	`{"addr":"127.0.0.1:0/3629751460","until":"2036-11-26T04:26:19.031721+0000"}][{"range":"192.0.2.0:0/24","until":"2036-11-26T04:26:19.031721+0000"}]`

func TestParseBlocklist(t *testing.T) {
	have, err := ParseBlocklist([]byte(blocklistLS))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2036, 11, 26, 4, 26, 19, 31721000, time.UTC)
	if got := have["127.0.0.1:0/3629751460"]; !got.Equal(want) || len(have) != 2 {
		t.Fatalf("parsed %v, want 2 entries, 127.0.0.1:0/3629751460 until %s", have, want)
	}
	if _, err := ParseBlocklist([]byte("listed 2 entries")); err == nil {
		t.Fatal("a status line parsed as a blocklist")
	}
}

// A fence adds one entry per client (its v1 and v2 addresses are one), and
// none for a client blocklisted already for long enough; an entry that
// lapses sooner (an operator's one-hour entry) or is missing (removed) is
// added again.
func TestToBlocklist(t *testing.T) {
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	keep := now.Add(DefaultBlocklistExpire / 2)
	have := map[string]time.Time{
		"127.0.0.1:0/1": now.Add(DefaultBlocklistExpire), // a fence's own
		"127.0.0.1:0/2": now.Add(time.Hour),              // an operator's, lapsing
	}
	vecs := []string{"[v2:127.0.0.1:0/1,v1:127.0.0.1:0/1]", "[v2:127.0.0.1:0/2,v1:127.0.0.1:0/2]", "[v2:127.0.0.1:0/3,v1:127.0.0.1:0/3]", "127.0.0.1:0/3"}
	got := ToBlocklist(vecs, have, keep)
	if want := []string{"127.0.0.1:0/2", "127.0.0.1:0/3"}; !slices.Equal(got, want) {
		t.Fatalf("to blocklist %v, want %v", got, want)
	}
	if got := ToBlocklist(vecs, nil, keep); len(got) != 3 {
		t.Fatalf("with an empty blocklist: %v, want the 3 clients", got)
	}
}
