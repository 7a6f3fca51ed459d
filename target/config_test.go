package target

import (
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

const (
	nqnA  = "nqn.2014-08.org.example:disk-a"
	nqnB  = "nqn.2014-08.org.example:disk-b"
	hostA = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"
	hostB = "nqn.2014-08.org.nvmexpress:uuid:7c9e6679-7425-40de-944b-e07fc1f90ae7"
)

// validConfig is a configuration that passes Validate, for the tests to
// break one rule at a time.
func validConfig() *Config {
	return &Config{
		Ports: []PortConfig{
			{ID: 1, Address: "127.0.0.1", Subsystems: []string{nqnA, nqnB}},
			{ID: 2, Address: "::1", ServiceID: 4421, Subsystems: []string{nqnA},
				Referrals: []ReferralConfig{{Address: "10.0.0.2", PortID: 7}}},
		},
		Subsystems: []SubsystemConfig{
			{NQN: nqnA, AllowAnyHost: true, Namespaces: []NamespaceConfig{
				{NSID: 1, Backend: BackendConfig{Kind: "memory", Size: "1MiB"}},
				{NSID: 2, Backend: BackendConfig{Kind: "file", Path: "/var/lib/nvmetd/a2.img", Size: "1GiB"},
					NGUID: "0123456789abcdef0123456789abcdef", UUID: "0f8fad5b-d9cb-469f-a165-70867728950e", EUI64: "00:11:22:33:44:55:66:77"},
			}},
			{NQN: nqnB, AllowedHosts: []string{hostA}, Namespaces: []NamespaceConfig{
				{NSID: 10, Backend: BackendConfig{Kind: "null", Size: "1GiB", BlockSize: 4096}},
			}},
		},
		Hosts: []HostConfig{{NQN: hostA, Description: "db server"}},
	}
}

func TestValidConfig(t *testing.T) {
	c := validConfig()
	before := c.Clone()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !reflect.DeepEqual(c, before) {
		t.Error("Validate modified the configuration")
	}
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate: %v", err)
	}
	if err := (&Config{}).Validate(); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

// TestValidate breaks one rule per case and checks the error names the
// field and says why.
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		field  string // the FieldError's Field
		reason string // a substring of its Reason
	}{
		// Namespaces.
		{"nsid zero", func(c *Config) { c.Subsystems[0].Namespaces[1].NSID = 0 },
			"subsystems[0].namespaces[1].nsid", "0 is reserved (must be 1..4294967294)"},
		{"nsid broadcast", func(c *Config) { c.Subsystems[0].Namespaces[0].NSID = 0xFFFFFFFF },
			"subsystems[0].namespaces[0].nsid", "4294967295 is reserved"},
		{"nsid above max_namespaces", func(c *Config) { c.Subsystems[0].Namespaces[0].NSID = 1025 },
			"subsystems[0].namespaces[0].nsid", "above the subsystem's max_namespaces 1024"},
		{"duplicate nsid", func(c *Config) { c.Subsystems[0].Namespaces[1].NSID = 1 },
			"subsystems[0].namespaces[1].nsid", "1 is also subsystems[0].namespaces[0].nsid"},
		{"size syntax", func(c *Config) { c.Subsystems[0].Namespaces[1].Backend.Size = "1XB" },
			"subsystems[0].namespaces[1].backend.size", `"1XB": unknown unit "XB"`},
		{"size not a number", func(c *Config) { c.Subsystems[0].Namespaces[1].Backend.Size = "big" },
			"subsystems[0].namespaces[1].backend.size", `"big": want a number`},
		{"size not a multiple of the block size", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Size = "1000" },
			"subsystems[0].namespaces[0].backend.size", "not a positive multiple of block size 512"},
		{"memory without size", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Size = "" },
			"subsystems[0].namespaces[0].backend.size", "positive multiple"},
		{"backend kind", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Kind = "tape" },
			"subsystems[0].namespaces[0].backend.kind", `"tape" is not one of file, block, null, memory, rbd`},
		{"backend kind missing", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Kind = "" },
			"subsystems[0].namespaces[0].backend.kind", "missing"},
		{"file without path", func(c *Config) { c.Subsystems[0].Namespaces[1].Backend.Path = "" },
			"subsystems[0].namespaces[1].backend.path", "required for kind file"},
		{"block size", func(c *Config) { c.Subsystems[1].Namespaces[0].Backend.BlockSize = 1024 },
			"subsystems[1].namespaces[0].backend.block_size", "1024 is not 512 or 4096"},
		{"direct on memory", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Direct = true },
			"subsystems[0].namespaces[0].backend.direct", "not used by kind memory"},
		{"exclusive on file", func(c *Config) { c.Subsystems[0].Namespaces[1].Backend.Exclusive = true },
			"subsystems[0].namespaces[1].backend.exclusive", "only used by kind block"},
		{"rbd without pool", func(c *Config) {
			c.Subsystems[0].Namespaces[1].Backend = BackendConfig{Kind: "rbd", Image: "vm1"}
		}, "subsystems[0].namespaces[1].backend.pool", "required for kind rbd"},
		{"rbd with a size", func(c *Config) {
			c.Subsystems[0].Namespaces[1].Backend = BackendConfig{Kind: "rbd", Pool: "rbd", Image: "vm1", Size: "1GiB"}
		}, "subsystems[0].namespaces[1].backend.size", "not used by kind rbd"},
		{"pool on file", func(c *Config) { c.Subsystems[0].Namespaces[1].Backend.Pool = "rbd" },
			"subsystems[0].namespaces[1].backend.pool", "only used by kind rbd"},
		{"nguid syntax", func(c *Config) { c.Subsystems[0].Namespaces[1].NGUID = "xyz" },
			"subsystems[0].namespaces[1].nguid", `"xyz" is not 32 hex digits`},
		{"nguid zero", func(c *Config) { c.Subsystems[0].Namespaces[1].NGUID = strings.Repeat("0", 32) },
			"subsystems[0].namespaces[1].nguid", "all zeroes is reserved"},
		{"uuid syntax", func(c *Config) { c.Subsystems[0].Namespaces[1].UUID = "0f8fad5b" },
			"subsystems[0].namespaces[1].uuid", "is not a UUID in 8-4-4-4-12 hex form"},
		{"uuid nil", func(c *Config) { c.Subsystems[0].Namespaces[1].UUID = "00000000-0000-0000-0000-000000000000" },
			"subsystems[0].namespaces[1].uuid", "nil UUID is reserved"},
		{"eui64 syntax", func(c *Config) { c.Subsystems[0].Namespaces[1].EUI64 = "00:11:22:33:44:55:66" },
			"subsystems[0].namespaces[1].eui64", "is not 16 hex digits"},
		{"eui64 mixed separators", func(c *Config) { c.Subsystems[0].Namespaces[1].EUI64 = "00:11-22:33:44:55:66:77" },
			"subsystems[0].namespaces[1].eui64", "is not 16 hex digits"},
		{"duplicate nguid", func(c *Config) {
			c.Subsystems[1].Namespaces[0].NGUID = "01234567-89ab-cdef-0123-456789abcdef"
		}, "subsystems[1].namespaces[0].nguid", "nguid is also subsystems[0].namespaces[1].nguid"},
		{"duplicate eui64", func(c *Config) { c.Subsystems[1].Namespaces[0].EUI64 = "0011223344556677" },
			"subsystems[1].namespaces[0].eui64", "eui64 is also subsystems[0].namespaces[1].eui64"},
		{"ana group", func(c *Config) { c.Subsystems[0].Namespaces[0].ANAGroup = 129 },
			"subsystems[0].namespaces[0].ana_group", "129 is out of range (must be 1..128)"},
		{"namespace io workers", func(c *Config) { c.Subsystems[0].Namespaces[0].IOWorkers = -1 },
			"subsystems[0].namespaces[0].io_workers", "-1 is out of range"},

		// Subsystems.
		{"nqn missing", func(c *Config) { c.Subsystems[1].NQN = ""; c.Ports[0].Subsystems = []string{nqnA} },
			"subsystems[1].nqn", "missing"},
		{"nqn syntax", func(c *Config) {
			c.Subsystems[1].NQN = "iqn.2014-08.org.example:b"
			c.Ports[0].Subsystems = []string{nqnA}
		},
			"subsystems[1].nqn", `"iqn.2014-08.org.example:b" is not a valid NQN`},
		{"nqn is discovery", func(c *Config) { c.Subsystems[1].NQN = nvmeof.DiscoveryNQN; c.Ports[0].Subsystems = []string{nqnA} },
			"subsystems[1].nqn", "is the discovery NQN"},
		{"duplicate nqn", func(c *Config) { c.Subsystems[1].NQN = nqnA; c.Ports[0].Subsystems = []string{nqnA} },
			"subsystems[1].nqn", "is also subsystems[0].nqn"},
		{"serial too long", func(c *Config) { c.Subsystems[0].Serial = strings.Repeat("9", 21) },
			"subsystems[0].serial", "is 21 bytes long (at most 20)"},
		{"serial not ascii", func(c *Config) { c.Subsystems[0].Serial = "sérial" },
			"subsystems[0].serial", "not printable ASCII"},
		{"serial spaces", func(c *Config) { c.Subsystems[0].Serial = "abc " },
			"subsystems[0].serial", "trailing spaces"},
		{"model too long", func(c *Config) { c.Subsystems[0].Model = strings.Repeat("m", 41) },
			"subsystems[0].model", "at most 40"},
		{"firmware too long", func(c *Config) { c.Subsystems[0].FirmwareRevision = "1.2.3-rc45" },
			"subsystems[0].firmware_revision", "at most 8"},
		{"allowed host not an nqn", func(c *Config) { c.Subsystems[1].AllowedHosts = []string{"db1"} },
			"subsystems[1].allowed_hosts[0]", `"db1" is not a valid NQN`},
		{"allowed host duplicate", func(c *Config) { c.Subsystems[1].AllowedHosts = []string{hostA, hostB, hostA} },
			"subsystems[1].allowed_hosts[2]", "is also allowed_hosts[0]"},
		{"allowed host discovery", func(c *Config) { c.Subsystems[1].AllowedHosts = []string{nvmeof.DiscoveryNQN} },
			"subsystems[1].allowed_hosts[0]", "discovery NQN, not a host NQN"},
		{"allow any host and a list", func(c *Config) { c.Subsystems[1].AllowAnyHost = true },
			"subsystems[1].allowed_hosts", "has no effect when allow_any_host is true"},
		{"cntlid_min reserved", func(c *Config) { c.Subsystems[0].CNTLIDMin = 0xFFF0 },
			"subsystems[0].cntlid_min", "65520 is above 65519"},
		{"cntlid_max reserved", func(c *Config) { c.Subsystems[0].CNTLIDMax = 0xFFFE },
			"subsystems[0].cntlid_max", "65534 is above 65519"},
		{"cntlid range inverted", func(c *Config) { c.Subsystems[0].CNTLIDMin = 100; c.Subsystems[0].CNTLIDMax = 10 },
			"subsystems[0].cntlid_max", "10 is below cntlid_min 100"},
		{"max_namespaces too large", func(c *Config) { c.Subsystems[0].MaxNamespaces = 0xFFFFFFFF },
			"subsystems[0].max_namespaces", "above the largest NSID"},

		// Ports.
		{"address not an ip", func(c *Config) { c.Ports[0].Address = "10.0.0.300" },
			"ports[0].address", `"10.0.0.300" is not an IP address`},
		{"address host name", func(c *Config) { c.Ports[0].Address = "storage.example" },
			"ports[0].address", "host names are not resolved"},
		{"address with port", func(c *Config) { c.Ports[0].Address = "127.0.0.1:4420" },
			"ports[0].address", "give the port in service_id"},
		{"address missing", func(c *Config) { c.Ports[0].Address = "" },
			"ports[0].address", "missing"},
		{"address v4-mapped", func(c *Config) { c.Ports[0].Address = "::ffff:10.0.0.1" },
			"ports[0].address", "write it as 10.0.0.1"},
		{"service id", func(c *Config) { c.Ports[0].ServiceID = 70000 },
			"ports[0].service_id", "70000 is not a TCP port"},
		{"duplicate port id", func(c *Config) { c.Ports[1].ID = 1 },
			"ports[1].id", "1 is also ports[0].id"},
		{"duplicate listen address", func(c *Config) { c.Ports[1].Address = "127.0.0.1"; c.Ports[1].ServiceID = 4420 },
			"ports[1].address", "127.0.0.1:4420 is also the listen address of ports[0]"},
		{"wildcard overlap", func(c *Config) { c.Ports[1].Address = "0.0.0.0"; c.Ports[1].ServiceID = 4420 },
			"ports[1].address", "0.0.0.0:4420 overlaps ports[0] at 127.0.0.1:4420"},
		{"inline data too large", func(c *Config) { c.Ports[0].InlineDataSize = 32768 },
			"ports[0].inline_data_size", "32768 is out of range (1..16384"},
		{"inline data not multiple of 16", func(c *Config) { c.Ports[0].InlineDataSize = 1000 },
			"ports[0].inline_data_size", "not a multiple of 16"},
		{"queue size too small", func(c *Config) { c.Ports[0].MaxQueueSize = 8 },
			"ports[0].max_queue_size", "8 is out of range (16..1024)"},
		{"queue size too large", func(c *Config) { c.Ports[0].MaxQueueSize = 4096 },
			"ports[0].max_queue_size", "4096 is out of range"},
		{"unknown subsystem", func(c *Config) { c.Ports[1].Subsystems = []string{"nqn.2014-08.org.example:nope"} },
			"ports[1].subsystems[0]", `"nqn.2014-08.org.example:nope" is not the NQN of a configured subsystem`},
		{"discovery subsystem on port", func(c *Config) { c.Ports[1].Subsystems = []string{nvmeof.DiscoveryNQN} },
			"ports[1].subsystems[0]", "every port serves"},
		{"port serves a subsystem twice", func(c *Config) { c.Ports[0].Subsystems = []string{nqnA, nqnB, nqnA} },
			"ports[0].subsystems[2]", "is also ports[0].subsystems[0]"},
		{"referral wildcard", func(c *Config) { c.Ports[1].Referrals[0].Address = "::" },
			"ports[1].referrals[0].address", "is a wildcard"},
		{"referral not an ip", func(c *Config) { c.Ports[1].Referrals[0].Address = "disco.example" },
			"ports[1].referrals[0].address", "is not an IP address"},
		{"referral service id", func(c *Config) { c.Ports[1].Referrals[0].ServiceID = -1 },
			"ports[1].referrals[0].service_id", "-1 is not a TCP port"},
		{"referral duplicate", func(c *Config) {
			c.Ports[1].Referrals = append(c.Ports[1].Referrals, ReferralConfig{Address: "10.0.0.2", ServiceID: 4420})
		}, "ports[1].referrals[1]", "10.0.0.2:4420 is also ports[1].referrals[0]"},

		// Hosts.
		{"host nqn", func(c *Config) { c.Hosts[0].NQN = "host-a" }, "hosts[0].nqn", `"host-a" is not a valid NQN`},
		{"host nqn missing", func(c *Config) { c.Hosts[0].NQN = "" }, "hosts[0].nqn", "missing"},
		{"host duplicate", func(c *Config) { c.Hosts = append(c.Hosts, HostConfig{NQN: hostA}) },
			"hosts[1].nqn", "is also hosts[0].nqn"},

		// Transport.
		{"crc policy", func(c *Config) { c.Transport.CRC = "sometimes" },
			"transport.crc", `"sometimes" is not one of off, offered, required`},
		{"max fpdu", func(c *Config) { c.Transport.MaxFPDU = 70000 },
			"transport.max_fpdu", "70000 is out of range (32..65528"},
		{"negative stall timeout", func(c *Config) { c.Transport.StallTimeout = -time.Second },
			"transport.stall_timeout", "-1s is negative"},
		{"busy poll too long", func(c *Config) { c.Transport.BusyPoll = 2 * time.Second },
			"transport.busy_poll", "longer than 1s"},

		// Tuning.
		{"io workers", func(c *Config) { c.Tuning.IOWorkers = -4 }, "tuning.io_workers", "-4 is out of range"},
		{"max transfer syntax", func(c *Config) { c.Tuning.MaxTransferSize = "1 meg" },
			"tuning.max_transfer_size", `"1 meg"`},
		{"max transfer not a power of two", func(c *Config) { c.Tuning.MaxTransferSize = "768KiB" },
			"tuning.max_transfer_size", "768KiB is not a power of two from 4KiB to 8MiB"},
		{"max transfer too large", func(c *Config) { c.Tuning.MaxTransferSize = "16MiB" },
			"tuning.max_transfer_size", "not a power of two from 4KiB to 8MiB"},
		{"buffer pool below max transfer", func(c *Config) { c.Tuning.BufferPoolSize = "512KiB" },
			"tuning.buffer_pool_size", "smaller than max_transfer_size 1MiB"},
		{"buffer pool unaligned", func(c *Config) { c.Tuning.BufferPoolSize = "1000000000" },
			"tuning.buffer_pool_size", "not a positive multiple of 4KiB"},
		{"buffer pool syntax", func(c *Config) { c.Tuning.BufferPoolSize = "lots" },
			"tuning.buffer_pool_size", `"lots"`},
		{"max io queues", func(c *Config) { c.Tuning.MaxIOQueues = 2000 }, "tuning.max_io_queues", "2000 is out of range (1..1024"},
		{"keep alive below a second", func(c *Config) { c.Tuning.KeepAliveMin = 500 * time.Millisecond },
			"tuning.keep_alive_min", "500ms is below 1s"},
		{"keep alive min above max", func(c *Config) { c.Tuning.KeepAliveMin = 2 * time.Hour },
			"tuning.keep_alive_min", "2h0m0s is above keep_alive_max 1h0m0s"},
		{"keep alive outside range", func(c *Config) { c.Tuning.KeepAlive = 2 * time.Hour },
			"tuning.keep_alive", "outside keep_alive_min..keep_alive_max"},
		{"keep alive beyond KATO", func(c *Config) { c.Tuning.KeepAliveMax = 2000 * time.Hour },
			"tuning.keep_alive_max", "KATO is 32-bit milliseconds"},
		{"health interval", func(c *Config) { c.Tuning.HealthInterval = time.Millisecond },
			"tuning.health_interval", "1ms is below 1s"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if seen[tt.name] {
				t.Fatalf("duplicate case name %q", tt.name)
			}
			seen[tt.name] = true
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate accepted the configuration; want %s: ...%s...", tt.field, tt.reason)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			if len(ve.Problems) != 1 {
				t.Errorf("want exactly one problem, got %d:\n%v", len(ve.Problems), err)
			}
			p := ve.Problems[0]
			if p.Field != tt.field || !strings.Contains(p.Reason, tt.reason) {
				t.Errorf("got  %s\nwant %s: ...%s...", p, tt.field, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), tt.field+": ") {
				t.Errorf("error text %q does not start with the field path", err)
			}
		})
	}
}

// TestValidateWrapsUnderlyingErrors checks that callers can reach the
// backend's and nvmeof's errors.
func TestValidateWrapsUnderlyingErrors(t *testing.T) {
	c := validConfig()
	c.Subsystems[1].Namespaces[0].Backend.BlockSize = 1000
	c.Subsystems[1].AllowedHosts = []string{"bad"}
	err := c.Validate()
	var ce *backend.ConfigError
	if !errors.As(err, &ce) || ce.Field != "block_size" {
		t.Errorf("errors.As(*backend.ConfigError) = %v, %+v", errors.As(err, &ce), ce)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatal("no *FieldError")
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 2 {
		t.Errorf("want 2 problems, one per line, got %d:\n%v", got, err)
	}
}

// TestValidateReportsEveryProblem checks that problems are all listed, in
// configuration order.
func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Ports[0].Address = "nowhere"
	c.Subsystems[0].Namespaces[0].NSID = 0
	c.Tuning.MaxIOQueues = -1
	err := c.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	var fields []string
	for _, p := range ve.Problems {
		fields = append(fields, p.Field)
	}
	want := []string{"subsystems[0].namespaces[0].nsid", "ports[0].address", "tuning.max_io_queues"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields = %q, want %q", fields, want)
	}
}

func TestApplyDefaults(t *testing.T) {
	saved := DefaultFirmwareRevision
	DefaultFirmwareRevision = "1.2.3"
	defer func() { DefaultFirmwareRevision = saved }()

	c := &Config{
		Ports: []PortConfig{{Address: "0.0.0.0"}, {ID: 1, Address: "::"}, {Address: "::1",
			Referrals: []ReferralConfig{{Address: "10.0.0.9"}}}},
		Subsystems: []SubsystemConfig{{NQN: nqnA, CNTLIDMin: 100, Namespaces: []NamespaceConfig{{NSID: 1}}}},
	}
	c.ApplyDefaults()
	if got := []uint16{c.Ports[0].ID, c.Ports[1].ID, c.Ports[2].ID}; !slices.Equal(got, []uint16{2, 1, 3}) {
		t.Errorf("port IDs = %v, want [2 1 3] (unused IDs from 1)", got)
	}
	p := c.Ports[0]
	if p.ServiceID != 4420 || p.InlineDataSize != 4096 || p.MaxQueueSize != 128 {
		t.Errorf("port defaults: %+v", p)
	}
	if c.Ports[2].Referrals[0].ServiceID != 4420 {
		t.Errorf("referral service id = %d", c.Ports[2].Referrals[0].ServiceID)
	}
	s := c.Subsystems[0]
	if s.Serial != DerivedSerial(nqnA) || len(s.Serial) != 16 {
		t.Errorf("serial = %q", s.Serial)
	}
	if s.Model != "nvmetd" || s.FirmwareRevision != "1.2.3" || s.MaxNamespaces != 1024 {
		t.Errorf("subsystem defaults: %+v", s)
	}
	if s.CNTLIDMin != 100 || s.CNTLIDMax != 0xFFEF {
		t.Errorf("cntlid range %d..%d, want 100..65519", s.CNTLIDMin, s.CNTLIDMax)
	}
	n := s.Namespaces[0]
	if n.Enabled == nil || !*n.Enabled || n.ANAGroup != 1 {
		t.Errorf("namespace defaults: %+v", n)
	}
	tr := c.Transport
	if tr.CRC != "off" || tr.StallTimeout != 30*time.Second || tr.ConnectTimeout != 10*time.Second || tr.MaxFPDU != 0 || tr.BusyPoll != 0 {
		t.Errorf("transport defaults: %+v", tr)
	}
	u := c.Tuning
	if u.MaxTransferSize != "1MiB" || u.BufferPoolSize != "4MiB" || u.KeepAlive != 120*time.Second ||
		u.KeepAliveMin != time.Second || u.KeepAliveMax != time.Hour || u.HealthInterval != time.Minute {
		t.Errorf("tuning defaults: %+v", u)
	}
	if want := min(max(8, runtime.NumCPU()), 128); u.MaxIOQueues != want {
		t.Errorf("max_io_queues = %d, want %d", u.MaxIOQueues, want)
	}
	if u.IOWorkers < 32 {
		t.Errorf("io_workers = %d, want at least 32", u.IOWorkers)
	}
	if u.MDTS() != 8 {
		t.Errorf("MDTS = %d, want 8", u.MDTS())
	}

	// Idempotent, and explicit values are kept.
	d := c.Clone()
	d.ApplyDefaults()
	if !reflect.DeepEqual(c, d) {
		t.Error("ApplyDefaults is not idempotent")
	}
	off := false
	e := &Config{Subsystems: []SubsystemConfig{{NQN: nqnA, Serial: "S1", Namespaces: []NamespaceConfig{{NSID: 1, Enabled: &off, ANAGroup: 5}}}}}
	e.ApplyDefaults()
	if e.Subsystems[0].Serial != "S1" || *e.Subsystems[0].Namespaces[0].Enabled || e.Subsystems[0].Namespaces[0].ANAGroup != 5 {
		t.Errorf("explicit values overwritten: %+v", e.Subsystems[0])
	}
}

func TestDerivedSerialStable(t *testing.T) {
	if DerivedSerial(nqnA) != DerivedSerial(nqnA) || DerivedSerial(nqnA) == DerivedSerial(nqnB) {
		t.Error("serial is not a stable function of the NQN")
	}
	// A golden value: changing the derivation changes what hosts see.
	if got := DerivedSerial("nqn.2014-08.org.example:disk-a"); got != "a0a01107b84efb58" {
		t.Logf("DerivedSerial golden = %s", got)
		t.Error("DerivedSerial changed; hosts would see a new serial number")
	}
}

func TestClone(t *testing.T) {
	c := validConfig()
	c.ApplyDefaults()
	d := c.Clone()
	if !reflect.DeepEqual(c, d) {
		t.Fatal("clone differs")
	}
	d.Ports[0].Subsystems[0] = "x"
	d.Ports[1].Referrals[0].Address = "x"
	d.Subsystems[1].AllowedHosts[0] = "x"
	d.Subsystems[0].Namespaces[0].NSID = 99
	*d.Subsystems[0].Namespaces[0].Enabled = false
	d.Hosts[0].Description = "x"
	if !reflect.DeepEqual(c, validConfigWithDefaults()) {
		t.Error("changing the clone changed the original")
	}
}

func validConfigWithDefaults() *Config {
	c := validConfig()
	c.ApplyDefaults()
	return c
}

func TestPortHelpers(t *testing.T) {
	tests := []struct {
		addr     string
		svc      int
		adrfam   uint8
		network  string
		listen   string
		wildcard bool
	}{
		{"127.0.0.1", 4420, nvmeof.AdrFamIPv4, "tcp4", "127.0.0.1:4420", false},
		{"0.0.0.0", 4420, nvmeof.AdrFamIPv4, "tcp4", "0.0.0.0:4420", true},
		{"::", 4421, nvmeof.AdrFamIPv6, "tcp6", "[::]:4421", true},
		{"fe80::1%eth0", 4420, nvmeof.AdrFamIPv6, "tcp6", "[fe80::1%eth0]:4420", false},
		{"bogus", 1, 0, "tcp6", "bogus:1", false},
	}
	for _, tt := range tests {
		p := PortConfig{Address: tt.addr, ServiceID: tt.svc}
		if p.AdrFam() != tt.adrfam || p.Network() != tt.network || p.ListenAddress() != tt.listen || p.IsWildcard() != tt.wildcard {
			t.Errorf("%s: AdrFam %d Network %s ListenAddress %s IsWildcard %v", tt.addr, p.AdrFam(), p.Network(), p.ListenAddress(), p.IsWildcard())
		}
	}
}

func TestParseIdentifiers(t *testing.T) {
	nguid := [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	for _, s := range []string{"0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789ABCDEF", "01234567-89ab-cdef-0123-456789abcdef"} {
		got, err := ParseNGUID(s)
		if err != nil || got != nguid {
			t.Errorf("ParseNGUID(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "0123", "0123456789abcdef0123456789abcdeg", "01234567_89ab_cdef_0123_456789abcdef", strings.Repeat("0", 32)} {
		if _, err := ParseNGUID(s); err == nil {
			t.Errorf("ParseNGUID(%q) accepted", s)
		}
	}
	eui := [8]byte{0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}
	for _, s := range []string{"0011223344556677", "00:11:22:33:44:55:66:77", "00-11-22-33-44-55-66-77"} {
		got, err := ParseEUI64(s)
		if err != nil || got != eui {
			t.Errorf("ParseEUI64(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "00112233445566", "00:11:22:33:44:55:66:7g", "00.11.22.33.44.55.66.77", "0000000000000000", "00:11:22:33:44:55:66:77:"} {
		if _, err := ParseEUI64(s); err == nil {
			t.Errorf("ParseEUI64(%q) accepted", s)
		}
	}
	n := validConfig().Subsystems[0].Namespaces[1]
	ids, err := n.Identifiers()
	if err != nil || !ids.HasNGUID || !ids.HasUUID || !ids.HasEUI64 || ids.NGUID != nguid || ids.EUI64 != eui {
		t.Errorf("Identifiers = %+v, %v", ids, err)
	}
	if ids, err := validConfig().Subsystems[0].Namespaces[0].Identifiers(); err != nil || ids.HasNGUID || ids.HasUUID || ids.HasEUI64 {
		t.Errorf("Identifiers of a namespace without any = %+v, %v", ids, err)
	}
}

func TestBackendConfig(t *testing.T) {
	n := NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "block", Path: "/dev/sdb", Size: "10GB", BlockSize: 4096,
		ReadOnly: true, Exclusive: true, DriveDB: "/etc/drivedb.yaml"}}
	got, err := n.BackendConfig()
	want := backend.Config{Kind: backend.KindBlock, Path: "/dev/sdb", Size: 10_000_000_000, BlockSize: 4096,
		ReadOnly: true, Exclusive: true, DriveDB: "/etc/drivedb.yaml"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("BackendConfig = %+v, %v", got, err)
	}
	n.Backend.Size = ""
	if got, err := n.BackendConfig(); err != nil || got.Size != 0 {
		t.Errorf("empty size = %d, %v; want 0 (whole device)", got.Size, err)
	}
	n.Backend.Size = "1.5"
	if _, err := n.BackendConfig(); err == nil {
		t.Error("size 1.5 accepted")
	}
	if !n.IsEnabled() {
		t.Error("unset Enabled is not enabled")
	}
	r := NamespaceConfig{NSID: 2, Backend: BackendConfig{Kind: "rbd", Pool: "rbd", Image: "vm1", RADOSNamespace: "tenant",
		CephConf: "/etc/ceph/ceph.conf", ClientID: "nvmetd", Keyring: "/etc/ceph/ceph.client.nvmetd.keyring",
		BlockSize: 4096, OpTimeout: 5 * time.Second, ConnectTimeout: 20 * time.Second}}
	got, err = r.BackendConfig()
	want = backend.Config{Kind: backend.KindRBD, Pool: "rbd", Image: "vm1", RADOSNamespace: "tenant",
		CephConf: "/etc/ceph/ceph.conf", ClientID: "nvmetd", Keyring: "/etc/ceph/ceph.client.nvmetd.keyring",
		BlockSize: 4096, OpTimeout: 5 * time.Second, ConnectTimeout: 20 * time.Second}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("rbd BackendConfig = %+v, %v", got, err)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("rbd backend config: %v", err)
	}
}

func TestTransportRDMA(t *testing.T) {
	tc := TransportConfig{CRC: "required", MaxFPDU: 9000, StallTimeout: time.Minute, ConnectTimeout: 5 * time.Second, BusyPoll: 50 * time.Microsecond}
	cfg, err := tc.RDMA()
	if err != nil || cfg.CRC != rdma.CRCRequired || cfg.MaxFPDU != 9000 || cfg.StallTimeout != time.Minute ||
		cfg.ConnectTimeout != 5*time.Second || cfg.BusyPoll != 50*time.Microsecond {
		t.Errorf("RDMA() = %+v, %v", cfg, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("nvmeof/rdma rejects the converted config: %v", err)
	}
	d := Defaults().Transport
	if cfg, err := d.RDMA(); err != nil || cfg.CRC != rdma.CRCOff || cfg.Validate() != nil {
		t.Errorf("default transport: %+v, %v", cfg, err)
	}
}

func TestMDTS(t *testing.T) {
	for _, tt := range []struct {
		size string
		mdts uint8
	}{{"4KiB", 0}, {"8KiB", 1}, {"1MiB", 8}, {"8MiB", 11}, {"768KiB", 0}, {"junk", 0}} {
		u := TuningConfig{MaxTransferSize: tt.size}
		if got := u.MDTS(); got != tt.mdts {
			t.Errorf("MDTS(%s) = %d, want %d", tt.size, got, tt.mdts)
		}
	}
}

func TestWarnings(t *testing.T) {
	c := &Config{
		Ports: []PortConfig{
			{ID: 1, Address: "0.0.0.0", Subsystems: []string{nqnA}},
			{ID: 2, Address: "127.0.0.1", ServiceID: 4421},
		},
		Subsystems: []SubsystemConfig{{NQN: nqnA, AllowAnyHost: true}, {NQN: nqnB}},
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		"ports[1] (127.0.0.1:4421) serves no subsystem",
		"subsystems[1] (" + nqnB + ") is served on no port",
		"subsystems[1] (" + nqnB + ") allows no host",
		"subsystems[0] (" + nqnA + ") allows any host and is served on 0.0.0.0:4420",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if w := validConfigWithDefaults().Warnings(); len(w) != 0 {
		t.Errorf("valid loopback config has warnings: %q", w)
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		summary []string
		check   func(t *testing.T, d *ConfigDiff)
	}{
		{"no change", func(c *Config) {}, nil, nil},
		{"defaults spelled out are no change", func(c *Config) {
			c.Ports[0].ServiceID = 4420
			c.Subsystems[0].Model = "nvmetd"
			c.Tuning.MaxTransferSize = "1MiB"
		}, nil, nil},
		{"reordered lists are no change", func(c *Config) {
			c.Ports[0].Subsystems = []string{nqnB, nqnA}
			c.Ports[0], c.Ports[1] = c.Ports[1], c.Ports[0]
			c.Subsystems[0].Namespaces[0], c.Subsystems[0].Namespaces[1] = c.Subsystems[0].Namespaces[1], c.Subsystems[0].Namespaces[0]
			c.Subsystems[1].AllowedHosts = []string{hostA}
		}, nil, nil},
		{"port added and removed", func(c *Config) {
			c.Ports = append(c.Ports[:1], PortConfig{ID: 3, Address: "0.0.0.0", ServiceID: 4430})
		}, []string{"port 3 added (0.0.0.0:4430)", "port 2 removed ([::1]:4421)"}, nil},
		{"port relisten and subsystems", func(c *Config) {
			c.Ports[1].Address = "::"
			c.Ports[1].Subsystems = []string{nqnB}
		}, []string{"port 2 changed: address, subsystems (listen [::1]:4421 -> [::]:4421)"}, func(t *testing.T, d *ConfigDiff) {
			pc := d.PortsChanged[0]
			if !pc.Relisten || !slices.Equal(pc.SubsystemsAdded, []string{nqnB}) || !slices.Equal(pc.SubsystemsRemoved, []string{nqnA}) {
				t.Errorf("%+v", pc)
			}
		}},
		{"port parameters without relisten", func(c *Config) {
			c.Ports[0].InlineDataSize = 8192
			c.Ports[1].Referrals[0].Address = "10.0.0.3"
		}, []string{"port 1 changed: inline_data_size", "port 2 changed: referrals"}, func(t *testing.T, d *ConfigDiff) {
			if d.PortsChanged[0].Relisten || d.PortsChanged[1].Relisten {
				t.Error("relisten without an address change")
			}
			r := d.PortsChanged[1]
			if len(r.ReferralsAdded) != 1 || r.ReferralsAdded[0].Address != "10.0.0.3" || len(r.ReferralsRemoved) != 1 || r.ReferralsRemoved[0].Address != "10.0.0.2" {
				t.Errorf("referrals: +%v -%v", r.ReferralsAdded, r.ReferralsRemoved)
			}
		}},
		{"subsystem added and removed", func(c *Config) {
			c.Subsystems[1] = SubsystemConfig{NQN: "nqn.2014-08.org.example:disk-c", AllowAnyHost: true,
				Namespaces: []NamespaceConfig{{NSID: 1, Backend: BackendConfig{Kind: "null", Size: "1GiB"}}}}
			c.Ports[0].Subsystems = []string{nqnA, "nqn.2014-08.org.example:disk-c"}
		}, []string{
			"port 1 changed: subsystems",
			"subsystem nqn.2014-08.org.example:disk-c added (1 namespaces)",
			"subsystem " + nqnB + " removed",
		}, nil},
		{"namespaces added removed changed", func(c *Config) {
			s := &c.Subsystems[0]
			s.Namespaces[0].Backend.Size = "2MiB"
			off := false
			s.Namespaces[1].Enabled = &off
			c.Subsystems[1].Namespaces = []NamespaceConfig{{NSID: 11, Backend: BackendConfig{Kind: "file", Path: "/srv/b11.img"}}}
		}, []string{
			"subsystem " + nqnA + " namespace 1 changed: backend.size",
			"subsystem " + nqnA + " namespace 2 changed: enabled",
			"subsystem " + nqnB + " namespace 11 added (file /srv/b11.img)",
			"subsystem " + nqnB + " namespace 10 removed",
		}, func(t *testing.T, d *ConfigDiff) {
			nc := d.SubsystemsChanged[0].NamespacesChanged[0]
			if nc.NSID != 1 || nc.Old.Backend.Size != "1MiB" || nc.New.Backend.Size != "2MiB" {
				t.Errorf("%+v", nc)
			}
		}},
		{"allowed hosts", func(c *Config) {
			c.Subsystems[1].AllowedHosts = []string{hostB}
			c.Subsystems[0].AllowAnyHost = false
		}, []string{
			"subsystem " + nqnA + " changed: allow_any_host",
			"subsystem " + nqnB + " changed: allowed_hosts",
			"subsystem " + nqnB + " allows host " + hostB,
			"subsystem " + nqnB + " no longer allows host " + hostA,
		}, nil},
		{"identity", func(c *Config) {
			c.Subsystems[0].Serial = "NEW"
			c.Subsystems[0].Namespaces[1].NGUID = "ffffffffffffffffffffffffffffffff"
		}, []string{
			"subsystem " + nqnA + " changed: serial",
			"subsystem " + nqnA + " namespace 2 changed: nguid",
		}, nil},
		{"hosts transport tuning", func(c *Config) {
			c.Hosts[0].Description = "renamed"
			c.Hosts = append(c.Hosts, HostConfig{NQN: hostB})
			c.Transport.CRC = "required"
			c.Tuning.MaxIOQueues = 3
			c.Tuning.KeepAliveMax = 2 * time.Hour
		}, []string{
			"host " + hostB + " added",
			"host " + hostA + " changed: description",
			"transport changed: transport.crc",
			"tuning changed: tuning.max_io_queues, tuning.keep_alive_max",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := validConfig()
			nw := validConfig()
			tt.mutate(nw)
			oldCopy, newCopy := old.Clone(), nw.Clone()
			d := Diff(old, nw)
			if !reflect.DeepEqual(old, oldCopy) || !reflect.DeepEqual(nw, newCopy) {
				t.Error("Diff modified its arguments")
			}
			if got := d.Summary(); !slices.Equal(got, tt.summary) {
				t.Errorf("Summary:\n got %q\nwant %q", got, tt.summary)
			}
			if d.Empty() != (len(tt.summary) == 0) {
				t.Errorf("Empty = %v", d.Empty())
			}
			if tt.check != nil {
				tt.check(t, d)
			}
			// The reverse diff is the mirror image.
			r := Diff(nw, old)
			if len(r.PortsAdded) != len(d.PortsRemoved) || len(r.SubsystemsAdded) != len(d.SubsystemsRemoved) || r.Empty() != d.Empty() {
				t.Errorf("reverse diff is not a mirror: %v vs %v", r, d)
			}
		})
	}
	if d := Diff(nil, validConfig()); len(d.PortsAdded) != 2 || len(d.SubsystemsAdded) != 2 || d.String() == "no changes" {
		t.Errorf("Diff(nil, c) = %v", d)
	}
	if d := Diff(nil, nil); d.String() != "no changes" {
		t.Errorf("Diff(nil, nil) = %v", d)
	}
}

func TestHealthStatus(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		h       backend.Health
		err     error
		summary string
	}{
		{"never", backend.Health{}, nil, "n/a"},
		{"file", backend.Health{Reason: "file: no device health"}, nil, "n/a: file: no device health"},
		{"error", backend.Health{}, errors.New("ioctl: permission denied"), "error: ioctl: permission denied"},
		{"ok", backend.Health{Available: true, Valid: backend.HealthAll, TemperatureKelvin: 310, AvailableSpare: 100}, nil, "ok"},
		{"critical", backend.Health{Available: true, Valid: backend.HealthAll,
			CriticalWarning: backend.CriticalWarningSpare | backend.CriticalWarningReadOnly | 0x80}, nil,
			"critical: spare below threshold, read-only, bits 0x80"},
		{"ata subset", backend.Health{Available: true, Valid: backend.HealthTemperature, CriticalWarning: 1}, nil, "ok"},
	}
	for _, tt := range tests {
		hs := NewHealthStatus(tt.h, tt.err, at)
		if got := hs.Summary(); got != tt.summary {
			t.Errorf("%s: Summary = %q, want %q", tt.name, got, tt.summary)
		}
		if !hs.CheckedAt.Equal(at) {
			t.Errorf("%s: CheckedAt = %v", tt.name, hs.CheckedAt)
		}
	}
	if got := (HealthStatus{}).Summary(); got != "not checked" {
		t.Errorf("zero HealthStatus: %q", got)
	}
	if hs := NewHealthStatus(backend.Health{Available: true, Valid: backend.HealthAll, TemperatureKelvin: 323}, nil, at); hs.TemperatureCelsius != 50 {
		t.Errorf("temperature %d", hs.TemperatureCelsius)
	}
}
