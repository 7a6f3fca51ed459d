package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// RADOSOptions configures [DialRADOS].
type RADOSOptions struct {
	CephConf       string // ceph.conf (monitors)
	ClientID       string // cephx user without "client." (caps: mon "profile rbd", osd "profile rbd pool=<Pool>")
	Keyring        string // keyring of ClientID; empty: the one ceph.conf names
	Pool           string // pool of the group objects
	RADOSNamespace string // RADOS namespace of the group objects ("" default)
	// GroupName names the gateway group: its objects are
	// nvmetd_gateway.<GroupName>.ana.<ANAGRPID> and
	// nvmetd_gateway.<GroupName>.config.
	GroupName string
	Groups    []uint32      // the ANA groups (an object each)
	Lease     time.Duration // the lock's duration
	// OpTimeout bounds each OSD operation (rados_osd_op_timeout, whole
	// seconds, at least 1; default 5s):
	// keep it below Lease - Margin so that a renewal that hangs does not
	// outlive the lease unnoticed (the machine steps down anyway).
	OpTimeout time.Duration
	// MonOpTimeout bounds each monitor command (rados_mon_op_timeout):
	// the blocklisting of a fence, which waits for a Paxos commit and may
	// take seconds on a loaded cluster; default 30s. A fence that times
	// out is retried (a survivor is not racing a lease).
	MonOpTimeout time.Duration
	// ConnectTimeout bounds connecting (client_mount_timeout).
	ConnectTimeout time.Duration
	// BlocklistExpire is how long a fence's blocklist entries last
	// (`osd blocklist add ADDR EXPIRE`); 0: DefaultBlocklistExpire. An
	// entry that lapses lets a fenced client that was frozen longer resend
	// its writes, so it must outlive any freeze: the monitor's own default
	// (mon_osd_blocklist_default_expire) is one hour.
	BlocklistExpire time.Duration
	// Member, if set, is what this gateway must not share with any other
	// member of the group (its name, its controller ID ranges): CheckConfig
	// compares it with the other members' entries on the config object
	// (see [MemberConflicts]) and records it there if none conflicts.
	Member *Member
	// WatchConfig watches the config object too ([RADOS.ConfigChanged]):
	// the gateway holds the group's configuration there, versioned.
	WatchConfig bool
}

// DefaultBlocklistExpire is the blocklist expiry of a fence: ten years.
// The monitor adds it to its clock as a utime_t, whose seconds are 32
// bits (until 2106): MaxBlocklistExpire keeps the sum below that.
const DefaultBlocklistExpire = 10 * 365 * 24 * time.Hour

// MaxBlocklistExpire is the longest blocklist expiry accepted: beyond
// about 2106 the monitor's utime_t (32-bit seconds) would wrap, and the
// entry would expire at once.
const MaxBlocklistExpire = 50 * 365 * 24 * time.Hour

// ErrRADOSNotBuilt is DialRADOS's error in a build without the rbd tag.
var ErrRADOSNotBuilt = errors.New("gateway: the gateway group needs the Ceph client libraries: " +
	"build nvmetd with cgo and -tags rbd (make build-rbd)")

// ObjectName is the RADOS object of ANA group id in group name.
func ObjectName(name string, id uint32) string {
	return fmt.Sprintf("nvmetd_gateway.%s.ana.%d", name, id)
}

// ConfigObjectName is the RADOS object holding the group configuration.
func ConfigObjectName(name string) string {
	return "nvmetd_gateway." + name + ".config"
}

// RecordsObjectName is the RADOS object holding a copy of each ANA
// group's record (omap key ana.<ANAGRPID>): the record of the highest
// epoch of the two is the one that counts, so that removing a group object
// does not hide its holder from a gateway that never saw it.
func RecordsObjectName(name string) string {
	return "nvmetd_gateway." + name + ".records"
}

// LockName is the cls_lock name on the group objects.
const LockName = "nvmetd-gateway"

// SplitAddrs returns the addresses inside rados_getaddrs's address vector
// ("[v2:127.0.0.1:0/1,v1:127.0.0.1:0/1]" or a bare address).
func SplitAddrs(vec string) []string {
	vec = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(vec), "["), "]")
	var out []string
	for _, a := range strings.Split(vec, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// ConfigDiff returns the lines of a canonical group configuration found
// only in here and only in there, as one line each ("" if none).
func ConfigDiff(here, there string) string {
	h, t := strings.Split(here, "\n"), strings.Split(there, "\n")
	var out []string
	for _, l := range h {
		if l != "" && !slices.Contains(t, l) {
			out = append(out, "here only: "+l)
		}
	}
	for _, l := range t {
		if l != "" && !slices.Contains(h, l) {
			out = append(out, "cluster only: "+l)
		}
	}
	return strings.Join(out, "; ")
}

// Member is what one gateway of a group must hold alone: its name, and the
// controller IDs (CNTLIDs) it hands out on each subsystem. Two gateways
// that serve one subsystem with overlapping CNTLID ranges give a host two
// controllers with the same CNTLID on the same subsystem: Linux keys a
// subsystem's controllers on it (nvme_validate_cntlid refuses the second
// path: "Duplicate cntlid"), so a host would lose a path, or worse, mix
// them up. Each member records this on the group's config object (omap key
// member.<Name>), and a gateway that conflicts with another member takes
// no group.
type Member struct {
	Name string
	// Identity says where this gateway runs (its host name and its
	// ports' listen addresses): a restart of the same gateway has the
	// same, a second gateway with the same name does not.
	Identity string
	// CNTLIDs maps each subsystem NQN to its [cntlid_min, cntlid_max].
	CNTLIDs map[string][2]uint16
}

// MemberKeyPrefix prefixes the omap keys of the members' entries on the
// config object.
const MemberKeyPrefix = "member."

// Encode is m's entry: one fact a line, sorted.
func (m Member) Encode() string {
	lines := []string{"identity " + m.Identity}
	for nqn, r := range m.CNTLIDs {
		lines = append(lines, fmt.Sprintf("cntlid %s %d-%d", nqn, r[0], r[1]))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// ParseMember reads an entry that Encode wrote (name is the key's).
func ParseMember(name, entry string) (Member, error) {
	m := Member{Name: name, CNTLIDs: map[string][2]uint16{}}
	for _, l := range strings.Split(entry, "\n") {
		switch {
		case l == "":
		case strings.HasPrefix(l, "identity "):
			m.Identity = strings.TrimPrefix(l, "identity ")
		case strings.HasPrefix(l, "cntlid "):
			var nqn string
			var lo, hi uint16
			if _, err := fmt.Sscanf(l, "cntlid %s %d-%d", &nqn, &lo, &hi); err != nil {
				return m, fmt.Errorf("gateway: member %s: %q: %w", name, l, err)
			}
			m.CNTLIDs[nqn] = [2]uint16{lo, hi}
		default:
			return m, fmt.Errorf("gateway: member %s: unknown line %q", name, l)
		}
	}
	return m, nil
}

// MemberConflicts compares me with the other members' entries (omap key
// without MemberKeyPrefix → entry) and returns one line per conflict: an
// entry under me's name from another identity (two gateways with one
// name), or a subsystem both serve with overlapping CNTLID ranges. An
// entry that cannot be read is a conflict too (nothing is known of it).
func MemberConflicts(me Member, entries map[string]string) []string {
	var out []string
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		o, err := ParseMember(name, entries[name])
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if name == me.Name {
			if o.Identity != me.Identity {
				out = append(out, fmt.Sprintf("name %s: already a member of the group from %q (here: %q); gateway names must be unique "+
					"(if that gateway moved, remove its entry: rados rmomapkey <config object> %s%s)", name, o.Identity, me.Identity, MemberKeyPrefix, name))
			}
			continue
		}
		nqns := make([]string, 0, len(me.CNTLIDs))
		for nqn := range me.CNTLIDs {
			nqns = append(nqns, nqn)
		}
		slices.Sort(nqns)
		for _, nqn := range nqns {
			r, or := me.CNTLIDs[nqn], o.CNTLIDs[nqn]
			if _, ok := o.CNTLIDs[nqn]; ok && r[0] <= or[1] && or[0] <= r[1] {
				out = append(out, fmt.Sprintf("subsystem %s: cntlid %d-%d here overlaps %d-%d of gateway %s: each gateway's "+
					"cntlid_min..cntlid_max must be disjoint from every other's (a host would see two controllers with one CNTLID)",
					nqn, r[0], r[1], or[0], or[1], name))
			}
		}
	}
	return out
}

// BlocklistEntry is the key of the monitor's blocklist entry for addr, an
// address of an address vector ("v2:127.0.0.1:0/123"): the monitor stores
// every entry with address type ANY (OSDMonitor, "osd blocklist add", since
// nautilus), so the v1 and v2 addresses of one client are one entry,
// listed as "127.0.0.1:0/123".
func BlocklistEntry(addr string) string {
	addr = strings.TrimSpace(addr)
	for _, p := range []string{"v1:", "v2:", "any:"} {
		if rest, ok := strings.CutPrefix(addr, p); ok {
			return rest
		}
	}
	return addr
}

// blocklistTimeLayout is how the monitor lists an entry's expiry
// (utime_t's localtime printed as JSON by "osd blocklist ls").
const blocklistTimeLayout = "2006-01-02T15:04:05.999999-0700"

// ParseBlocklist parses the output of the monitor command `osd blocklist
// ls` (format json: [{"addr": ..., "until": ...}], then the range entries
// in the same form) into each entry's
// expiry, keyed as BlocklistEntry keys them. An entry whose expiry cannot
// be read is kept with the zero time (taken as lapsing: it is added
// again).
func ParseBlocklist(b []byte) (map[string]time.Time, error) {
	var list []struct {
		Addr  string `json:"addr"`
		Until string `json:"until"`
	}
	// Since 16.2.8 the monitor lists the range entries after the address
	// entries, as a second array: only the first is read (a range does
	// not stand for an address's own entry: that is added all the same).
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&list); err != nil {
		return nil, fmt.Errorf("gateway: parse the blocklist (osd blocklist ls): %w", err)
	}
	out := make(map[string]time.Time, len(list))
	for _, e := range list {
		until, _ := time.Parse(blocklistTimeLayout, e.Until)
		out[BlocklistEntry(e.Addr)] = until
	}
	return out, nil
}

// ToBlocklist returns the blocklist entries a fence of vecs adds: one per
// client address (BlocklistEntry; the v1 and v2 addresses of a client are
// one entry), in order, without those listed in have that last at least
// until keep (a fence's own, or any that outlives the fence's expiry by
// more than half: re-adding it would only cost a monitor commit). An entry
// missing from have (an operator removed it, or it lapsed) or lapsing
// sooner is added again: the client it fences may still write.
func ToBlocklist(vecs []string, have map[string]time.Time, keep time.Time) []string {
	var out []string
	for _, v := range vecs {
		for _, a := range SplitAddrs(v) {
			e := BlocklistEntry(a)
			if slices.Contains(out, e) {
				continue
			}
			if until, ok := have[e]; ok && !until.Before(keep) {
				continue
			}
			out = append(out, e)
		}
	}
	return out
}
