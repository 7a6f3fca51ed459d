package daemon

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// load parses args and loads the configuration, failing the test on a
// command line error.
func load(t *testing.T, args ...string) (*loadedConfig, error) {
	t.Helper()
	o, fs, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	return loadConfig(o, fs, false)
}

func TestLoadGoodFiles(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, lc *loadedConfig)
	}{
		{"testdata/good-minimal.yaml", func(t *testing.T, lc *loadedConfig) {
			c := lc.Target
			if len(c.Ports) != 1 || c.Ports[0].ID != 1 || c.Ports[0].ServiceID != 4420 || c.Ports[0].MaxQueueSize != 128 {
				t.Errorf("port: %+v", c.Ports)
			}
			n := c.Subsystems[0].Namespaces[0]
			if n.Backend.Kind != "memory" || n.Backend.Size != "64MiB" || !n.IsEnabled() || n.ANAGroup != 1 {
				t.Errorf("namespace: %+v", n)
			}
			if lc.Daemon.LogLevel != "info" || lc.Daemon.ShutdownTimeout != 30*time.Second || lc.Daemon.HealthLogInterval != time.Hour {
				t.Errorf("daemon defaults: %+v", lc.Daemon)
			}
			if lc.DefaultImage != "" {
				t.Errorf("a configuration file has no default image, got %q", lc.DefaultImage)
			}
		}},
		{"testdata/good-two-ports.yaml", func(t *testing.T, lc *loadedConfig) {
			c := lc.Target
			if c.Ports[0].ID != 10 || c.Ports[0].ServiceID != 4420 || c.Ports[0].InlineDataSize != 16384 ||
				c.Ports[0].Referrals[0].ServiceID != 4420 || c.Ports[0].Referrals[0].PortID != 3 {
				t.Errorf("port 10: %+v", c.Ports[0])
			}
			if c.Ports[1].Network() != "tcp6" || !c.Ports[1].IsWildcard() {
				t.Errorf("port 11: %+v", c.Ports[1])
			}
			s := c.Subsystems[0]
			// A single string where a list is expected is a one-element list.
			if !slices.Equal(s.AllowedHosts, []string{"nqn.2014-08.org.nvmexpress:uuid:7c9e6679-7425-40de-944b-e07fc1f90ae7"}) {
				t.Errorf("allowed_hosts: %q", s.AllowedHosts)
			}
			n := s.Namespaces[0]
			if n.IsEnabled() || n.Backend.Size != "1073741824" || !n.Backend.Direct || !n.Backend.MustExist || n.IOWorkers != 4 || n.ANAGroup != 2 {
				t.Errorf("namespace 5: %+v", n)
			}
			if k := c.Subsystems[1].Namespaces[0].Backend.Kind; k != "null" {
				t.Errorf("bench kind %q", k)
			}
			if c.Transport.CRC != "required" || c.Transport.MaxFPDU != 9000 || c.Transport.BusyPoll != 50*time.Microsecond {
				t.Errorf("transport: %+v", c.Transport)
			}
			if c.Tuning.MDTS() != 9 || c.Tuning.MaxIOQueues != 4 || c.Tuning.IOWorkers != 64 {
				t.Errorf("tuning: %+v", c.Tuning)
			}
			if lc.Daemon.LogLevel != "debug" || lc.Daemon.ShutdownTimeout != 5*time.Second {
				t.Errorf("daemon: %+v", lc.Daemon)
			}
			if len(lc.Warnings) != 1 || !strings.Contains(lc.Warnings[0], "allows any host and is served on [::]:4420") {
				t.Errorf("warnings: %q", lc.Warnings)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			isolate(t)
			lc, err := load(t, "--config", tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if lc.File != tt.file {
				t.Errorf("File = %q", lc.File)
			}
			tt.check(t, lc)
		})
	}
}

// TestLoadBadFiles checks that every problem is reported with the path of
// the key.
func TestLoadBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"testdata/bad-unknown-key.yaml", []string{
			"daemon.log_levl: unknown key",
			"ports[0].adress: unknown key",
			"subsystems[0].namespaces[0].backend.sise: unknown key",
			"subsytems: unknown key",
		}},
		{"testdata/bad-values.yaml", []string{
			`subsystems[0].allowed_hosts[0]: "db1" is not a valid NQN: does not start with "nqn."`,
			"subsystems[0].namespaces[0].nsid: 0 is reserved (must be 1..4294967294)",
			`subsystems[0].namespaces[1].backend.size: "1XB": unknown unit "XB"`,
			`ports[0].address: "10.0.0.300" is not an IP address`,
			`ports[0].subsystems[1]: "nqn.2014-08.org.example:missing" is not the NQN of a configured subsystem`,
		}},
		{"testdata/bad-types.yaml", []string{
			`ports[0].service_id: "not-a-number" is not a valid int`,
			`transport.connect_timeout: "soon" is not a duration`,
			"transport.stall_timeout: 30 has no unit (write a duration such as 30s)",
		}},
		{"testdata/bad-daemon.yaml", []string{
			`daemon.log_level: "loud" is not one of debug, info, warn, error`,
			`daemon.log_format: "xml" is not one of auto, console, json`,
			"daemon.shutdown_timeout: 0s is not positive",
		}},
		{"testdata/bad-duplicates.yaml", []string{
			`subsystems[1].nqn: "nqn.2014-08.org.example:a" is also subsystems[0].nqn`,
			"ports[1].id: 1 is also ports[0].id",
			"ports[1].address: 127.0.0.1:4420 is also the listen address of ports[0]",
		}},
		{"testdata/bad-syntax.yaml", []string{"testdata/bad-syntax.yaml", "yaml: line"}},
		{"testdata/does-not-exist.yaml", []string{"config file: stat testdata/does-not-exist.yaml: no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			isolate(t)
			_, err := load(t, "--config", tt.file)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if got, want := strings.Count(err.Error(), "\n"), len(tt.want); tt.file != "testdata/bad-syntax.yaml" && !strings.HasPrefix(tt.file, "testdata/does") && got != want {
				t.Errorf("want %d problem lines, got %d:\n%v", want, got, err)
			}
		})
	}
}

// TestEnvOverrides sets configuration through NVMETD_* variables and flags.
func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, lc *loadedConfig)
		err   string
	}{
		{"transport and tuning over the file", map[string]string{
			"NVMETD_TRANSPORT_CRC":            "offered",
			"NVMETD_TRANSPORT_STALL_TIMEOUT":  "1m",
			"NVMETD_TUNING_MAX_TRANSFER_SIZE": "512KiB",
			"NVMETD_TUNING_MAX_IO_QUEUES":     "2",
		}, []string{"--config", "testdata/good-two-ports.yaml"}, func(t *testing.T, lc *loadedConfig) {
			tr, tu := lc.Target.Transport, lc.Target.Tuning
			if tr.CRC != "offered" || tr.StallTimeout != time.Minute || tr.MaxFPDU != 9000 {
				t.Errorf("transport: %+v", tr)
			}
			if tu.MaxTransferSize != "512KiB" || tu.MaxIOQueues != 2 || tu.IOWorkers != 64 {
				t.Errorf("tuning: %+v", tu)
			}
		}, ""},
		{"daemon settings", map[string]string{
			"NVMETD_LOG_LEVEL":        "warn",
			"NVMETD_LOG_FORMAT":       "json",
			"NVMETD_SHUTDOWN_TIMEOUT": "7s",
			"NVMETD_CONTROL_SOCKET":   "/tmp/x/ctl.sock",
			"NVMETD_DATA_DIR":         "/srv/nvmetd",
		}, []string{"--config", "testdata/good-two-ports.yaml"}, func(t *testing.T, lc *loadedConfig) {
			d := lc.Daemon
			if d.LogLevel != "warn" || d.LogFormat != "json" || d.ShutdownTimeout != 7*time.Second ||
				d.ControlSocket != "/tmp/x/ctl.sock" || d.DataDir != "/srv/nvmetd" {
				t.Errorf("daemon: %+v", d)
			}
		}, ""},
		{"flags beat the environment", map[string]string{"NVMETD_LOG_LEVEL": "warn", "NVMETD_SHUTDOWN_TIMEOUT": "7s"},
			[]string{"--config", "testdata/good-minimal.yaml", "--log-level", "error", "--shutdown-timeout", "9s"},
			func(t *testing.T, lc *loadedConfig) {
				if lc.Daemon.LogLevel != "error" || lc.Daemon.ShutdownTimeout != 9*time.Second {
					t.Errorf("daemon: %+v", lc.Daemon)
				}
			}, ""},
		{"config file from the environment", map[string]string{"NVMETD_CONFIG": "testdata/good-minimal.yaml"}, nil,
			func(t *testing.T, lc *loadedConfig) {
				if lc.File != "testdata/good-minimal.yaml" {
					t.Errorf("File = %q", lc.File)
				}
			}, ""},
		{"listen replaces the ports", map[string]string{"NVMETD_LISTEN": "0.0.0.0:4430, [::]:4431,10.1.2.3"},
			[]string{"--config", "testdata/good-two-ports.yaml"}, func(t *testing.T, lc *loadedConfig) {
				var got []string
				for _, p := range lc.Target.Ports {
					got = append(got, p.ListenAddress())
					if p.InlineDataSize != 16384 || len(p.Referrals) != 1 || !slices.Equal(p.Subsystems, []string{"nqn.2014-08.org.example:acl"}) {
						t.Errorf("port %d does not copy the first port's settings: %+v", p.ID, p)
					}
				}
				if want := []string{"0.0.0.0:4430", "[::]:4431", "10.1.2.3:4420"}; !slices.Equal(got, want) {
					t.Errorf("listen = %q, want %q", got, want)
				}
			}, ""},
		{"listen flag beats the environment", map[string]string{"NVMETD_LISTEN": "0.0.0.0:4430"},
			[]string{"--config", "testdata/good-minimal.yaml", "--listen", "127.0.0.2:4499"}, func(t *testing.T, lc *loadedConfig) {
				if len(lc.Target.Ports) != 1 || lc.Target.Ports[0].ListenAddress() != "127.0.0.2:4499" {
					t.Errorf("ports: %+v", lc.Target.Ports)
				}
			}, ""},
		{"bad listen", map[string]string{"NVMETD_LISTEN": "localhost:http"}, []string{"--config", "testdata/good-minimal.yaml"}, nil,
			`--listen/NVMETD_LISTEN: "localhost:http": port "http" is not a number`},
		{"listen host name", map[string]string{"NVMETD_LISTEN": "storage:4420"}, []string{"--config", "testdata/good-minimal.yaml"}, nil,
			`ports[0].address: "storage" is not an IP address (host names are not resolved)`},
		{"bad environment value names the variable", map[string]string{"NVMETD_TUNING_MAX_IO_QUEUES": "many"}, nil, nil,
			`tuning.max_io_queues: "many" is not a valid int (from NVMETD_TUNING_MAX_IO_QUEUES)`},
		{"invalid environment value names the key", map[string]string{"NVMETD_TRANSPORT_CRC": "always"}, nil, nil,
			`transport.crc: "always" is not one of off, offered, required`},
		{"empty variables are ignored", map[string]string{"NVMETD_TRANSPORT_CRC": "", "NVMETD_LOG_LEVEL": ""}, nil,
			func(t *testing.T, lc *loadedConfig) {
				if lc.Target.Transport.CRC != "off" || lc.Daemon.LogLevel != "info" {
					t.Errorf("transport %+v daemon %+v", lc.Target.Transport, lc.Daemon)
				}
			}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			lc, err := load(t, tt.args...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, lc)
		})
	}
}

// TestBuiltinDefault checks the configuration used without a file.
func TestBuiltinDefault(t *testing.T) {
	dir := isolate(t)
	data := filepath.Join(dir, "data")
	lc, err := load(t, "--data-dir", data, "--default-size", "64MiB")
	if err != nil {
		t.Fatal(err)
	}
	c := lc.Target
	if lc.File != "" || len(c.Ports) != 1 || c.Ports[0].ListenAddress() != "127.0.0.1:4420" {
		t.Fatalf("ports: %+v", c.Ports)
	}
	s := c.Subsystems[0]
	if _, ok := nvmeof.UUIDFromNQN(s.NQN); !ok || s.AllowAnyHost || !slices.Equal(c.Ports[0].Subsystems, []string{s.NQN}) {
		t.Errorf("subsystem: %+v", s)
	}
	// Only this machine's host, with the key in the data directory.
	hostID, err := initiator.HostIdentityFrom(hostPaths)
	if err != nil {
		t.Fatal(err)
	}
	if !s.AuthRequired || !slices.Equal(s.AllowedHosts, []string{hostID.NQN}) || len(c.Hosts) != 1 || c.Hosts[0].NQN != hostID.NQN ||
		c.Hosts[0].DHCHAPKey != "file:"+filepath.Join(data, "default-host.key") {
		t.Errorf("access: %+v, hosts %+v", s, c.Hosts)
	}
	n := s.Namespaces[0]
	img := filepath.Join(data, "default-ns1.img")
	if n.NSID != 1 || n.Backend.Kind != "file" || n.Backend.Path != img || n.Backend.Size != "64MiB" {
		t.Errorf("namespace: %+v", n)
	}
	if lc.DefaultImage != img || lc.DefaultSize != 64<<20 {
		t.Errorf("default image %q %d", lc.DefaultImage, lc.DefaultSize)
	}
	if len(lc.Warnings) != 0 {
		t.Errorf("warnings: %q", lc.Warnings)
	}
	// The NQN is generated once per data directory and stable.
	persistLoad := func(args ...string) *loadedConfig {
		t.Helper()
		o, fs, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		lc, err := loadConfig(o, fs, true)
		if err != nil {
			t.Fatal(err)
		}
		return lc
	}
	if _, err := os.Stat(hostPaths.HostNQN); !os.IsNotExist(err) {
		t.Fatalf("the host NQN file exists before a start: %v", err)
	}
	firstLC := persistLoad("--data-dir", data)
	first := firstLC.Target.Subsystems[0].NQN
	// A start saves this machine's host identity (neither file existed),
	// so that the admitted NQN stays the one hosts present.
	if b, err := os.ReadFile(hostPaths.HostNQN); err != nil || strings.TrimSpace(string(b)) != firstLC.DefaultHostNQN {
		t.Errorf("host NQN file after a start: %q %v, admitted %s", b, err, firstLC.DefaultHostNQN)
	}
	if again := persistLoad("--data-dir", data).Target.Subsystems[0].NQN; again != first {
		t.Errorf("second load: NQN %s vs %s", again, first)
	}
	// Another instance on the same machine (same machine ID) has another.
	if other := persistLoad("--data-dir", filepath.Join(dir, "data2")).Target.Subsystems[0].NQN; other == first {
		t.Errorf("two data directories share the default subsystem NQN %s", first)
	}
	if _, err := load(t, "--default-size", "1.5"); err == nil || !strings.Contains(err.Error(), "--default-size") {
		t.Errorf("--default-size 1.5: %v", err)
	}
	// The default configuration file is used when it exists.
	writeFile(t, filepath.Dir(defaultConfigPath), filepath.Base(defaultConfigPath), mustRead(t, "testdata/good-minimal.yaml"))
	lc3, err := load(t)
	if err != nil || lc3.File != defaultConfigPath {
		t.Errorf("with %s: %v, File %q", defaultConfigPath, err, lc3.File)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnsureImage creates the default image sparse, once.
func TestEnsureImage(t *testing.T) {
	img := filepath.Join(t.TempDir(), "a", "b", "default-ns1.img")
	created, err := ensureImage(img, 1<<30)
	if err != nil || !created {
		t.Fatalf("ensureImage: %v, %v", created, err)
	}
	fi, err := os.Stat(img)
	if err != nil || fi.Size() != 1<<30 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v %v", fi, err)
	}
	if st, ok := fi.Sys().(interface{ Blocks() int64 }); ok && st.Blocks() != 0 {
		t.Errorf("image is not sparse: %d blocks", st.Blocks())
	}
	if err := os.WriteFile(img, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	created, err = ensureImage(img, 1<<30)
	if err != nil || created {
		t.Fatalf("second ensureImage: %v, %v", created, err)
	}
	if b, _ := os.ReadFile(img); string(b) != "data" {
		t.Error("existing image was overwritten")
	}
}

// TestDefaultSubsystemNQN checks the default subsystem's UUID: random,
// generated once per data directory (unique per instance: VM clones share a
// machine ID), except in a data directory of an earlier version (an image,
// no UUID file), which keeps the UUID derived from the machine ID.
func TestDefaultSubsystemNQN(t *testing.T) {
	dir := t.TempDir()
	id1 := writeFile(t, dir, "machine-id-1", "3d1219c7c4c5404aaa1f6d2a48adfda4\n")
	const derived = "nqn.2014-08.org.nvmexpress:uuid:3ce88d67-1bac-8641-be3a-46d0c2359975"

	// A new data directory: random, kept only if persist.
	data := filepath.Join(dir, "data")
	r1, err := defaultSubsystemNQN([]string{id1}, data, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := nvmeof.ValidateNQN(r1); err != nil || !strings.HasPrefix(r1, nvmeof.UUIDNQNPrefix) || r1 == derived {
		t.Fatalf("%q: %v", r1, err)
	}
	if _, err := os.Stat(filepath.Join(data, "default-subsystem.uuid")); !os.IsNotExist(err) {
		t.Errorf("written without persist: %v", err)
	}
	r2, err := defaultSubsystemNQN([]string{id1}, data, true)
	if err != nil || r2 == r1 || r2 == derived {
		t.Fatalf("persist: %s %v", r2, err)
	}
	if fi, err := os.Stat(filepath.Join(data, "default-subsystem.uuid")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("UUID file: %v %v", fi, err)
	}
	r3, err := defaultSubsystemNQN([]string{id1}, data, true)
	if err != nil || r3 != r2 {
		t.Errorf("not stable: %s then %s (%v)", r2, r3, err)
	}
	// A clone of the machine (same machine ID), a new data directory.
	if c, _ := defaultSubsystemNQN([]string{id1}, filepath.Join(dir, "clone"), true); c == r2 {
		t.Error("two instances with one machine ID share the NQN")
	}

	// Migration: an image and no UUID file keep the machine-ID NQN.
	old := filepath.Join(dir, "old")
	writeFile(t, old, "default-ns1.img", "")
	m, err := defaultSubsystemNQN([]string{filepath.Join(dir, "missing"), id1}, old, true)
	if err != nil || m != derived {
		t.Errorf("the machine-id derivation changed (hosts would see a new NQN): %s %v", m, err)
	}
	if b, _ := os.ReadFile(filepath.Join(old, "default-subsystem.uuid")); !strings.HasPrefix(derived, nvmeof.UUIDNQNPrefix) ||
		strings.TrimSpace(string(b)) != strings.TrimPrefix(derived, nvmeof.UUIDNQNPrefix) {
		t.Errorf("migrated UUID file holds %q", b)
	}

	writeFile(t, data, "default-subsystem.uuid", "garbage")
	if _, err := defaultSubsystemNQN([]string{id1}, data, true); err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Errorf("garbage UUID file: %v", err)
	}
}

// TestExampleConfig checks that configs/nvmetd.yaml is valid and sets
// every key of the schema.
func TestExampleConfig(t *testing.T) {
	isolate(t)
	const example = "../../configs/nvmetd.yaml"
	lc, err := load(t, "--config", example)
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	if len(lc.Warnings) != 0 {
		t.Errorf("warnings: %q", lc.Warnings)
	}
	// Every key of the schema appears in the example, set or commented.
	text := mustRead(t, example)
	for _, key := range schemaKeys(reflect.TypeOf(fileConfig{})) {
		if !strings.Contains(text, key+":") {
			t.Errorf("%s does not show the key %q", example, key)
		}
	}
}

// schemaKeys lists the leaf keys of a configuration type by their
// mapstructure names.
func schemaKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		ft := f.Type
		if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if opts != "squash" {
			keys = append(keys, name)
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Duration(0)) {
			keys = append(keys, schemaKeys(ft)...)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// TestCheckConfig runs --check-config: exit codes, the effective
// configuration on stdout, and that it reads back to the same
// configuration.
func TestCheckConfig(t *testing.T) {
	for _, file := range []string{"testdata/good-minimal.yaml", "testdata/good-two-ports.yaml", "../../configs/nvmetd.yaml", ""} {
		t.Run(filepath.Base(file+"builtin"), func(t *testing.T) {
			dir := isolate(t)
			args := []string{"--check-config", "--data-dir", filepath.Join(dir, "data")}
			if file != "" {
				args = append(args, "--config", file)
			} else {
				// The data directory of a daemon that has run once: the
				// default subsystem's UUID is generated at the first start.
				writeFile(t, filepath.Join(dir, "data"), "default-subsystem.uuid", "0f0f3a3e-3e9c-4c1e-8a55-5b2f4a7d1c01\n")
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "the configuration is valid") {
				t.Errorf("stderr: %s", stderr.String())
			}
			if file == "" {
				if ents, err := os.ReadDir(filepath.Join(dir, "data")); err != nil || len(ents) != 1 {
					t.Errorf("--check-config wrote into the data directory: %v %v", ents, err)
				}
			}
			eff := writeFile(t, dir, "effective.yaml", stdout.String())
			orig, err := load(t, append([]string{"--data-dir", filepath.Join(dir, "data")}, configArgs(file)...)...)
			if err != nil {
				t.Fatal(err)
			}
			again, err := load(t, "--config", eff)
			if err != nil {
				t.Fatalf("effective configuration does not load: %v\n%s", err, stdout.String())
			}
			if file == "" {
				// The built-in default's NQN comes from the machine and is
				// the same; only the source differs.
				again.DefaultImage, again.DefaultSize = orig.DefaultImage, orig.DefaultSize
			}
			again.File = orig.File
			if d := target.Diff(orig.Target, again.Target); !d.Empty() || orig.Daemon != again.Daemon {
				t.Errorf("effective configuration reads back differently: %v\n%+v\n%+v", d, orig.Daemon, again.Daemon)
			}
			var first, second bytes.Buffer
			if err := writeEffective(&first, orig); err != nil {
				t.Fatal(err)
			}
			if err := writeEffective(&second, again); err != nil {
				t.Fatal(err)
			}
			if first.String() != second.String() {
				t.Errorf("effective configuration is not a fixed point:\n%s\n---\n%s", first.String(), second.String())
			}
		})
	}

	isolate(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--check-config", "--config", "testdata/bad-values.yaml"}, &stdout, &stderr); code != exitFailure {
		t.Errorf("invalid configuration: exit %d", code)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "ports[0].address") {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func configArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{"--config", file}
}

func TestApplyListen(t *testing.T) {
	cfg := &target.Config{Subsystems: []target.SubsystemConfig{{NQN: "nqn.2014-08.org.example:a"}, {NQN: "nqn.2014-08.org.example:b"}}}
	if err := applyListen(cfg, []string{"::1", "[fe80::1%eth0]:4421"}); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Ports) != 2 || cfg.Ports[0].ListenAddress() != "[::1]:4420" || cfg.Ports[1].ListenAddress() != "[fe80::1%eth0]:4421" ||
		cfg.Ports[1].ID != 2 || len(cfg.Ports[1].Subsystems) != 2 {
		t.Errorf("ports: %+v", cfg.Ports)
	}
	for _, bad := range []string{"127.0.0.1:", "1.2.3.4:x", "[::1"} {
		if err := applyListen(&target.Config{}, []string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
