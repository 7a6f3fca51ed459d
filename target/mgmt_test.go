package target

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mgmtSample() *Config {
	f := false
	c := &Config{
		Ports: []PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: 4421, Subsystems: []string{"nqn.2014-08.org.example:a"},
			ANAGroups: []ANAGroupConfig{{ID: 2, State: "inaccessible"}}, Referrals: []ReferralConfig{{Address: "10.0.0.2", PortID: 3}}}},
		Subsystems: []SubsystemConfig{{NQN: "nqn.2014-08.org.example:a", AllowedHosts: []string{"nqn.2014-08.org.example:h"}, Model: "m",
			Namespaces: []NamespaceConfig{
				{NSID: 1, Backend: BackendConfig{Kind: "memory", Size: "1MiB"}},
				{NSID: 3, Enabled: &f, ANAGroup: 2, Backend: BackendConfig{Kind: "file", Path: "/tmp/x", Size: "2MiB", Direct: true}},
			}}},
		Hosts: []HostConfig{{NQN: "nqn.2014-08.org.example:h", Description: "h"}},
	}
	c.ApplyDefaults()
	return c
}

// TestMgmtEdits checks each edit and its refusals (the kind and the
// field), and that the clone being edited never shares lists with the
// original.
func TestMgmtEdits(t *testing.T) {
	orig := mgmtSample()
	keep := orig.Clone()
	c := orig.Clone()
	kind := func(err error) EditKind {
		t.Helper()
		e, ok := AsEditError(err)
		if !ok {
			t.Fatalf("not an EditError: %v", err)
		}
		return e.Kind
	}
	if _, err := c.AddPort(PortConfig{ID: 1}); kind(err) != EditExists {
		t.Error("duplicate port")
	}
	if p, err := c.AddPort(PortConfig{Address: "::1"}); err != nil || p != "ports[1]" || c.Ports[1].ID != 2 {
		t.Errorf("add port: %q %v %+v", p, err, c.Ports)
	}
	if _, err := c.SetANAState(1, 2, "optimized"); err != nil || c.Ports[0].ANAGroups[0].State != "optimized" {
		t.Errorf("ana: %v %+v", err, c.Ports[0].ANAGroups)
	}
	if _, err := c.SetANAState(1, 200, "optimized"); kind(err) != EditInvalid {
		t.Error("group 200")
	}
	if _, err := c.SetANAState(1, 1, "sideways"); kind(err) != EditInvalid {
		t.Error("state sideways")
	}
	if _, nsid, err := c.AddNamespace("nqn.2014-08.org.example:a", NamespaceConfig{Backend: BackendConfig{Kind: "null", Size: "1GiB"}}); err != nil || nsid != 2 {
		t.Errorf("add namespace: nsid %d %v", nsid, err)
	}
	if _, _, err := c.AddNamespace("nqn.2014-08.org.example:a", NamespaceConfig{NSID: 3}); kind(err) != EditExists {
		t.Error("duplicate nsid")
	}
	if _, _, err := c.AddNamespace("nqn.2014-08.org.example:zz", NamespaceConfig{}); kind(err) != EditNotFound {
		t.Error("unknown subsystem")
	}
	if _, err := c.ResizeNamespace("nqn.2014-08.org.example:a", 1, "4MiB"); err != nil || c.Subsystems[0].Namespaces[0].Backend.Size != "4MiB" {
		t.Error("resize")
	}
	if err := c.RemoveNamespace("nqn.2014-08.org.example:a", 9); kind(err) != EditNotFound {
		t.Error("remove namespace 9")
	}
	if _, err := c.AllowHost("nqn.2014-08.org.example:a", "nqn.2014-08.org.example:h2"); err != nil || len(c.Subsystems[0].AllowedHosts) != 2 {
		t.Error("allow host")
	}
	if err := c.DisallowHost("nqn.2014-08.org.example:a", "nqn.2014-08.org.example:nope"); kind(err) != EditNotFound {
		t.Error("disallow unknown")
	}
	if err := c.UnlinkSubsystem(1, "nqn.2014-08.org.example:a"); err != nil || len(c.Ports[0].Subsystems) != 0 {
		t.Error("unlink")
	}
	if _, err := c.LinkSubsystem(1, "nqn.2014-08.org.example:a"); err != nil || len(c.Ports[0].Subsystems) != 1 {
		t.Error("link")
	}
	if err := c.RemoveSubsystem("nqn.2014-08.org.example:a"); err != nil || len(c.Subsystems) != 0 || len(c.Ports[0].Subsystems) != 0 {
		t.Error("remove subsystem takes it off the ports")
	}
	if err := c.RemoveHost("nqn.2014-08.org.example:h"); err != nil || len(c.Hosts) != 0 {
		t.Error("remove host")
	}
	if !reflect.DeepEqual(orig, keep) {
		t.Errorf("editing a clone changed the original:\n%+v\n%+v", orig, keep)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the edited configuration is invalid: %v", err)
	}
}

// TestMgmtJSONRoundTrip: EncodeJSON then DecodeJSON gives the same
// configuration; keys are the configuration file's.
func TestMgmtJSONRoundTrip(t *testing.T) {
	c := mgmtSample()
	b, err := json.Marshal(EncodeJSON(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"service_id":4421`, `"allowed_hosts":["nqn.2014-08.org.example:h"]`, `"connect_timeout":"10s"`, `"ana_groups":[{"id":2,"state":"inaccessible"}]`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b)
		}
	}
	var back Config
	if err := DecodeJSON(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := Diff(c, &back); !d.Empty() {
		t.Errorf("round trip: %s", d)
	}
}

// TestMgmtDecodeErrors: every problem names its key.
func TestMgmtDecodeErrors(t *testing.T) {
	var n NamespaceConfig
	err := DecodeJSON([]byte(`{"nsid": "x", "backend": {"sise": 1}, "bogus": true}`), &n)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v", err)
	}
	fields := map[string]bool{}
	for _, p := range ve.Problems {
		fields[p.Field] = true
	}
	for _, f := range []string{"nsid", "backend.sise", "bogus"} {
		if !fields[f] {
			t.Errorf("no problem named %s: %v", f, err)
		}
	}
	var tc TransportConfig
	if err := DecodeJSON([]byte(`{"stall_timeout": 30}`), &tc); err == nil || !strings.Contains(err.Error(), "stall_timeout") {
		t.Errorf("a duration without a unit: %v", err)
	}
	// A patch leaves absent keys alone.
	n = NamespaceConfig{NSID: 4, Backend: BackendConfig{Kind: "file", Path: "/x", Size: "1MiB"}}
	if err := DecodeJSON([]byte(`{"backend": {"size": 4096}}`), &n); err != nil || n.Backend.Path != "/x" || n.Backend.Size != "4096" || n.NSID != 4 {
		t.Errorf("patch: %+v %v", n, err)
	}
}

// TestWithoutDefaults: stripping the defaults and applying them again
// gives the configuration back; defaults are gone, settings stay.
func TestWithoutDefaults(t *testing.T) {
	c := mgmtSample()
	s := c.WithoutDefaults()
	if p := s.Ports[0]; p.ID != 1 || p.ServiceID != 4421 || p.InlineDataSize != 0 || p.MaxQueueSize != 0 || p.Referrals[0].ServiceID != 0 {
		t.Errorf("port: %+v", p)
	}
	if sub := s.Subsystems[0]; sub.Serial != "" || sub.FirmwareRevision != "" || sub.Model != "m" || sub.CNTLIDMax != 0 ||
		sub.Namespaces[0].Enabled != nil || sub.Namespaces[1].Enabled == nil || sub.Namespaces[1].ANAGroup != 2 || sub.Namespaces[0].ANAGroup != 0 {
		t.Errorf("subsystem: %+v", sub)
	}
	s.ApplyDefaults()
	if !reflect.DeepEqual(s, c) {
		t.Errorf("defaults applied again:\n%+v\nwant\n%+v", s, c)
	}
}
