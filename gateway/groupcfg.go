package gateway

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The group's configuration held in RADOS, versioned (docs/rbd.md "Group
// configuration in RADOS"): the config object's data is the version, the
// compare-and-set word of every change; its omap holds the configuration
// of that version (omap key group_config), the version again (readable
// with rados getomapval) and each member's running version
// (running.<name>).

// omap keys of the versioned group configuration on the config object.
const (
	keyGroupConfig = "group_config"
	keyVersion     = "version"
	// RunningKeyPrefix prefixes the omap keys of the version each member
	// runs (running.<name>).
	RunningKeyPrefix = "running."
)

// versionLen is the width of the version in the config object's data:
// 20 decimal digits (a uint64), zero-padded, so that a compare-and-set
// compares whole words and `rados get` shows it.
const versionLen = 20

// EncodeVersion is version v as the config object's data.
func EncodeVersion(v uint64) []byte { return fmt.Appendf(nil, "%020d", v) }

// DecodeVersion reads the config object's data (empty: no version, 0).
func DecodeVersion(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) != versionLen {
		return 0, fmt.Errorf("gateway: the group configuration's version %q is not %d digits", b, versionLen)
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("gateway: the group configuration's version %q: %w", b, err)
	}
	return v, nil
}

// ErrVersionConflict is in the error of a change whose base version is no
// longer the stored one (errors.Is): another change was stored first.
var ErrVersionConflict = errors.New("the group configuration changed since the version the change was based on")

// VersionConflictError is a change refused because the stored version is
// not its base.
type VersionConflictError struct {
	Base, Current uint64
}

func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("gateway: %v: based on version %d, the group runs version %d (read it again and retry)", ErrVersionConflict, e.Base, e.Current)
}

func (e *VersionConflictError) Is(target error) bool { return target == ErrVersionConflict }

// ErrLegacyConfig is in the error of a gateway that would hold the group's
// configuration in RADOS while the config object holds an unversioned
// configuration (written by gateways that keep it in their files) that
// differs from this gateway's file.
var ErrLegacyConfig = errors.New("the group's config object holds an unversioned configuration that differs from this gateway's file")

// StoredConfig is the group configuration as stored: its version, its
// text (YAML, the configuration file's form; package gwtarget reads it)
// and the version each member runs.
type StoredConfig struct {
	Version uint64
	Config  []byte
	Running map[string]uint64
}

// ParseRunning reads the running.<name> omap values (key without the
// prefix → decimal version); an entry that does not parse is left out.
func ParseRunning(vals map[string][]byte) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range vals {
		name, ok := strings.CutPrefix(k, RunningKeyPrefix)
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64); err == nil {
			out[name] = n
		}
	}
	return out
}

// DefaultCNTLIDKey is the subsystem key of a member's default CNTLID
// range: the range it hands out on every subsystem its file does not list
// (those added to the group's configuration after its start).
const DefaultCNTLIDKey = "*"

// Range is the CNTLID range m hands out on subsystem nqn: its own for
// that subsystem, else its default, else every CNTLID.
func (m Member) Range(nqn string) [2]uint16 {
	if r, ok := m.CNTLIDs[nqn]; ok {
		return r
	}
	if r, ok := m.CNTLIDs[DefaultCNTLIDKey]; ok {
		return r
	}
	return [2]uint16{nvmeof.CNTLIDMin, nvmeof.CNTLIDMax}
}

// CNTLIDConflicts returns one line per pair of members whose CNTLID ranges
// overlap on one of the subsystems nqns (each member's range as
// [Member.Range] gives it): a change of the group configuration that adds
// such a subsystem would give a host two controllers with one CNTLID.
func CNTLIDConflicts(nqns []string, members []Member) []string {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	nqns = slices.Clone(nqns)
	slices.Sort(nqns)
	var out []string
	for _, nqn := range slices.Compact(nqns) {
		for i := range ms {
			for j := i + 1; j < len(ms); j++ {
				a, b := ms[i].Range(nqn), ms[j].Range(nqn)
				if a[0] <= b[1] && b[0] <= a[1] {
					out = append(out, fmt.Sprintf("subsystem %s: cntlid %d-%d of gateway %s overlaps %d-%d of gateway %s "+
						"(give each gateway its own range: gateway.cntlid_min/cntlid_max in its file)", nqn, a[0], a[1], ms[i].Name, b[0], b[1], ms[j].Name))
				}
			}
		}
	}
	return out
}
