package daemon

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, o *options, fs *pflag.FlagSet)
		err   string
	}{
		{"defaults", nil, nil, func(t *testing.T, o *options, fs *pflag.FlagSet) {
			if o.configExplicit || o.checkConfig || o.version || o.listen != nil || o.defaultSize != "1GiB" {
				t.Errorf("%+v", o)
			}
			if v := fs.Lookup("shutdown-timeout").Value.String(); v != "30s" {
				t.Errorf("shutdown-timeout default %s", v)
			}
			if v := fs.Lookup("log-format").Value.String(); v != "auto" {
				t.Errorf("log-format default %s", v)
			}
		}, ""},
		{"every flag", []string{"--config", "/x.yaml", "--data-dir", "/d", "--log-level", "debug", "--log-format", "json",
			"--shutdown-timeout", "5s", "--control-socket", "/s.sock", "--health-log-interval", "2h",
			"--listen", "0.0.0.0:4420,[::]:4420", "--default-size", "2GiB", "--check-config", "--version"}, nil,
			func(t *testing.T, o *options, fs *pflag.FlagSet) {
				if o.configFile != "/x.yaml" || !o.configExplicit || !o.checkConfig || !o.version || o.defaultSize != "2GiB" {
					t.Errorf("%+v", o)
				}
				if !slices.Equal(o.listen, []string{"0.0.0.0:4420", "[::]:4420"}) {
					t.Errorf("listen %q", o.listen)
				}
				for flag, want := range map[string]string{"data-dir": "/d", "log-level": "debug", "log-format": "json",
					"shutdown-timeout": "5s", "control-socket": "/s.sock", "health-log-interval": "2h0m0s"} {
					if got := fs.Lookup(flag).Value.String(); got != want || !fs.Changed(flag) {
						t.Errorf("--%s = %q, want %q", flag, got, want)
					}
				}
			}, ""},
		{"environment", nil, map[string]string{"NVMETD_CONFIG": "/etc/x.yaml", "NVMETD_LISTEN": "1.2.3.4:1, ,5.6.7.8", "NVMETD_DEFAULT_SIZE": "8GiB"},
			func(t *testing.T, o *options, fs *pflag.FlagSet) {
				if o.configFile != "/etc/x.yaml" || !o.configExplicit || o.defaultSize != "8GiB" || !slices.Equal(o.listen, []string{"1.2.3.4:1", "5.6.7.8"}) {
					t.Errorf("%+v", o)
				}
			}, ""},
		{"flag beats environment", []string{"--config", "/a.yaml"}, map[string]string{"NVMETD_CONFIG": "/b.yaml"},
			func(t *testing.T, o *options, fs *pflag.FlagSet) {
				if o.configFile != "/a.yaml" {
					t.Errorf("config %q", o.configFile)
				}
			}, ""},
		{"unknown flag", []string{"--verbose"}, nil, nil, "unknown flag: --verbose"},
		{"bad duration", []string{"--shutdown-timeout", "soon"}, nil, nil, `invalid argument "soon" for "--shutdown-timeout"`},
		{"stray argument", []string{"start"}, nil, nil, `unexpected argument "start"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			o, fs, err := parseFlags(tt.args, &stderr)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o, fs)
		})
	}
}

func TestRunCommandLine(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"--version"}, exitOK, "nvmetd ", ""},
		{[]string{"--help"}, exitOK, "", "NVMETD_TRANSPORT_CRC"},
		{[]string{"--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"status", "--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"status", "-o", "yaml"}, exitUsage, "", `--output "yaml" is not normal or json`},
		{[]string{"status", "--help"}, exitOK, "", "usage: nvmetd status"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			isolate(t)
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

// TestRunInvalidConfig: the daemon exits 78 (EX_CONFIG, no restart by the
// unit) and logs every problem.
func TestRunInvalidConfig(t *testing.T) {
	isolate(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"--config", "testdata/bad-values.yaml", "--log-format", "json"}, &stdout, &stderr)
	if code != exitConfig {
		t.Errorf("exit %d, want %d", code, exitConfig)
	}
	if !strings.Contains(stderr.String(), `"level":"error"`) || !strings.Contains(stderr.String(), `ports[0].address: \"10.0.0.300\"`) {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func TestFirmwareRevision(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-rc.1+meta", "1.2.3"},
		{"v10.20.30", "10.20.30"},
		{"v123.456.789", "123.456."},
		{"abcdef123456-dirty", "abcdef12"},
		{"dev", "dev"},
		{"", "dev"},
		{"v", "dev"},
		{"v0.0.0-20250101000000-abcdef123456", "0.0.0"},
	} {
		if got := firmwareRevision(tt.in); got != tt.want {
			t.Errorf("firmwareRevision(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDefaultPaths checks where the data directory and control socket go.
func TestDefaultPaths(t *testing.T) {
	dir := isolate(t)
	t.Setenv("STATE_DIRECTORY", "/var/lib/nvmetd:/var/lib/other")
	t.Setenv("RUNTIME_DIRECTORY", "/run/nvmetd")
	if got := defaultDataDir(); got != "/var/lib/nvmetd" {
		t.Errorf("data dir under systemd = %q", got)
	}
	if got := defaultControlSocket(); got != "/run/nvmetd/nvmetd.sock" {
		t.Errorf("control socket under systemd = %q", got)
	}
	os.Unsetenv("STATE_DIRECTORY")
	os.Unsetenv("RUNTIME_DIRECTORY")
	if isRoot() {
		want := rootDataDir
		if !writable(rootDataDir) {
			want = filepath.Join(dir, "state", "nvmetd")
		}
		if got := defaultDataDir(); got != want {
			t.Errorf("root data dir = %q, want %q", got, want)
		}
		if got := defaultControlSocket(); got != rootControlSocket {
			t.Errorf("root control socket = %q", got)
		}
		t.Skip("the rest is for non-root users; running as root")
	}
	if got := defaultDataDir(); got != filepath.Join(dir, "state", "nvmetd") {
		t.Errorf("data dir = %q", got)
	}
	if got := defaultControlSocket(); got != filepath.Join(dir, "run", "nvmetd.sock") {
		t.Errorf("control socket = %q", got)
	}
	t.Setenv("XDG_STATE_HOME", "relative")
	t.Setenv("HOME", "/home/u")
	if got := defaultDataDir(); got != "/home/u/.local/state/nvmetd" {
		t.Errorf("data dir without XDG_STATE_HOME = %q", got)
	}
}

func TestWritable(t *testing.T) {
	dir := t.TempDir()
	if !writable(filepath.Join(dir, "a", "b", "c")) {
		t.Error("a missing directory under a writable one is not writable")
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if !isRoot() && writable(filepath.Join(dir, "a")) {
		t.Error("a directory under a read-only one is writable")
	}
}

func TestResolveConfigFile(t *testing.T) {
	dir := isolate(t)
	if f, err := resolveConfigFile(&options{}); err != nil || f != "" {
		t.Errorf("no file: %q %v", f, err)
	}
	if _, err := resolveConfigFile(&options{configFile: filepath.Join(dir, "nope.yaml"), configExplicit: true}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("explicit missing file: %v", err)
	}
	cfgDir := filepath.Join(dir, "confdir")
	f := writeFile(t, cfgDir, "nvmetd.yaml", "")
	t.Setenv("CONFIGURATION_DIRECTORY", cfgDir)
	if got, err := resolveConfigFile(&options{}); err != nil || got != f {
		t.Errorf("$CONFIGURATION_DIRECTORY: %q %v", got, err)
	}
}
