package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// daemonConfig is the "daemon" section of the configuration file: settings
// of the program rather than of the target.
type daemonConfig struct {
	// DataDir holds the default namespace's image and the fallback
	// subsystem UUID.
	DataDir string `mapstructure:"data_dir"`
	// LogLevel is debug, info, warn or error. It changes on SIGHUP.
	LogLevel string `mapstructure:"log_level"`
	// LogFormat is auto, console or json.
	LogFormat string `mapstructure:"log_format"`
	// ControlSocket is the unix socket `nvmetd status` talks to.
	ControlSocket string `mapstructure:"control_socket"`
	// ShutdownTimeout bounds the drain on SIGTERM.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// HealthLogInterval is how often backend health is logged.
	HealthLogInterval time.Duration `mapstructure:"health_log_interval"`
}

// fileConfig is the whole configuration file: the target's configuration
// at the top level and the daemon section.
type fileConfig struct {
	Daemon daemonConfig `mapstructure:"daemon"`
	// Gateway makes this nvmetd a gateway of a group (nil: stand-alone).
	Gateway       *gatewayConfig `mapstructure:"gateway"`
	target.Config `mapstructure:",squash"`
}

// loadedConfig is a loaded and validated configuration.
type loadedConfig struct {
	// File is the configuration file read; "" for the built-in default.
	File string
	// FileSum is the SHA-256 of File's content as read, so that the
	// management API does not persist over edits made since.
	FileSum [32]byte
	Daemon  daemonConfig
	// Gateway is the gateway section, defaults applied (nil: none).
	Gateway *gatewayConfig
	// Target has defaults applied and is valid.
	Target *target.Config
	// Warnings are target.Config.Warnings.
	Warnings []string
	// DefaultImage and DefaultSize describe the default namespace's image
	// file, created if missing; DefaultImage is "" unless the built-in
	// default configuration is in use.
	DefaultImage string
	DefaultSize  int64
}

// daemonFlags maps daemon.* keys to the flags that set them.
var daemonFlags = []struct{ key, flag, env, help string }{
	{"daemon.data_dir", "data-dir", "NVMETD_DATA_DIR", "directory of the default namespace"},
	{"daemon.log_level", "log-level", "NVMETD_LOG_LEVEL", "debug, info, warn, error"},
	{"daemon.log_format", "log-format", "NVMETD_LOG_FORMAT", "auto, console, json"},
	{"daemon.control_socket", "control-socket", "NVMETD_CONTROL_SOCKET", "control socket path"},
	{"daemon.shutdown_timeout", "shutdown-timeout", "NVMETD_SHUTDOWN_TIMEOUT", "drain timeout on SIGTERM, e.g. 30s"},
	{"daemon.health_log_interval", "health-log-interval", "NVMETD_HEALTH_LOG_INTERVAL", "e.g. 1h"},
}

// envPrefix prefixes every environment variable; "transport.crc" is
// NVMETD_TRANSPORT_CRC (viper's key replacer turns "." into "_").
const envPrefix = "NVMETD"

// sectionKeys returns the scalar keys of a configuration section (struct
// v), e.g. "transport.crc", from its mapstructure tags.
func sectionKeys(section string, v any) []string {
	var keys []string
	t := reflect.TypeOf(v)
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ",")
		keys = append(keys, section+"."+name)
	}
	return keys
}

// scalarEnvKeys are the target keys settable from the environment: every
// transport and tuning setting.
func scalarEnvKeys() []string {
	return append(sectionKeys("transport", target.TransportConfig{}), sectionKeys("tuning", target.TuningConfig{})...)
}

// envName is the environment variable of a configuration key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envUsage lists the environment variables for --help.
func envUsage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-34s %s\n", "NVMETD_CONFIG", "configuration file (as --config)")
	fmt.Fprintf(&b, "  %-34s %s\n", "NVMETD_LISTEN", "listen addresses (as --listen), e.g. 0.0.0.0:4420,[::]:4420")
	fmt.Fprintf(&b, "  %-34s %s\n", "NVMETD_DEFAULT_SIZE", "default namespace size (as --default-size)")
	for _, f := range daemonFlags {
		fmt.Fprintf(&b, "  %-34s %s (as --%s)\n", f.env, f.help, f.flag)
	}
	for _, k := range scalarEnvKeys() {
		fmt.Fprintf(&b, "  %-34s %s\n", envName(k), k)
	}
	return b.String()
}

// newViper returns a viper with the daemon's defaults, flags and
// environment variables bound.
func newViper(fs *pflag.FlagSet) (*viper.Viper, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.SetDefault("daemon.data_dir", defaultDataDir())
	v.SetDefault("daemon.log_level", "info")
	v.SetDefault("daemon.log_format", "auto")
	v.SetDefault("daemon.control_socket", defaultControlSocket())
	v.SetDefault("daemon.shutdown_timeout", "30s")
	v.SetDefault("daemon.health_log_interval", "1h")
	for _, f := range daemonFlags {
		if fs != nil {
			if fl := fs.Lookup(f.flag); fl != nil && fl.Changed {
				if err := v.BindPFlag(f.key, fl); err != nil {
					return nil, err
				}
			}
		}
		if err := v.BindEnv(f.key, f.env); err != nil {
			return nil, err
		}
	}
	for _, k := range scalarEnvKeys() {
		if err := v.BindEnv(k); err != nil { // NVMETD_ + key with "_" for "."
			return nil, err
		}
	}
	return v, nil
}

// loadConfig reads the configuration: the file (or the built-in default),
// then environment variables, then flags; rejects unknown keys; applies
// defaults and validates. persist allows writing the fallback subsystem
// UUID of the built-in default into the data directory (not for
// --check-config).
func loadConfig(o *options, fs *pflag.FlagSet, persist bool) (*loadedConfig, error) {
	file, err := resolveConfigFile(o)
	if err != nil {
		return nil, err
	}
	v, err := newViper(fs)
	if err != nil {
		return nil, err
	}
	where := "configuration"
	var fileSum [32]byte
	if file != "" {
		where = "config file " + file
		doc, err := readConfigFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := v.ReadConfig(bytes.NewReader(doc)); err != nil {
			return nil, fmt.Errorf("%s: %w", where, yamlError(doc, err))
		}
		fileSum = sha256.Sum256(doc)
	}
	var fc fileConfig
	if err := v.UnmarshalExact(&fc, viper.DecodeHook(decodeHook())); err != nil {
		return nil, fmt.Errorf("%s:\n%s", where, formatDecodeError(err))
	}
	lc := &loadedConfig{File: file, FileSum: fileSum, Daemon: fc.Daemon}
	if err := lc.Daemon.validate(); err != nil {
		return nil, fmt.Errorf("%s:\n%w", where, err)
	}
	cfg := fc.Config
	if file == "" {
		if len(cfg.Ports) > 0 || len(cfg.Subsystems) > 0 || len(cfg.Hosts) > 0 {
			return nil, fmt.Errorf("%s: ports, subsystems and hosts can only be set in a configuration file", where)
		}
		size, err := backend.ParseSize(o.defaultSize)
		if err != nil {
			return nil, fmt.Errorf("--default-size: %w", err)
		}
		nqn, err := defaultSubsystemNQN(machineIDFiles, lc.Daemon.DataDir, persist)
		if err != nil {
			return nil, err
		}
		lc.DefaultImage = filepath.Join(lc.Daemon.DataDir, "default-ns1.img")
		lc.DefaultSize = size
		builtin := builtinConfig(nqn, lc.DefaultImage, backend.FormatSize(size))
		cfg.Ports, cfg.Subsystems = builtin.Ports, builtin.Subsystems
	}
	if len(o.listen) > 0 {
		if err := applyListen(&cfg, o.listen); err != nil {
			return nil, err
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s:\n%w", where, err)
	}
	if fc.Gateway != nil {
		fc.Gateway.applyDefaults()
		if err := fc.Gateway.validate(&cfg); err != nil {
			return nil, fmt.Errorf("%s:\n%w", where, err)
		}
		lc.Gateway = fc.Gateway
	}
	lc.Target = &cfg
	lc.Warnings = append(cfg.Warnings(), unknownEnv(os.Environ())...)
	return lc, nil
}

// validate checks the daemon section.
func (d *daemonConfig) validate() error {
	var problems []string
	if _, err := zapcore.ParseLevel(d.LogLevel); err != nil || d.LogLevel == "" {
		problems = append(problems, fmt.Sprintf("daemon.log_level: %q is not one of debug, info, warn, error", d.LogLevel))
	}
	if !slices.Contains([]string{"auto", "console", "json"}, d.LogFormat) {
		problems = append(problems, fmt.Sprintf("daemon.log_format: %q is not one of auto, console, json", d.LogFormat))
	}
	if d.ShutdownTimeout <= 0 {
		problems = append(problems, fmt.Sprintf("daemon.shutdown_timeout: %s is not positive", d.ShutdownTimeout))
	}
	if d.HealthLogInterval < time.Minute {
		problems = append(problems, fmt.Sprintf("daemon.health_log_interval: %s is below 1m", d.HealthLogInterval))
	}
	if d.DataDir == "" {
		problems = append(problems, "daemon.data_dir: empty")
	} else if abs, err := filepath.Abs(d.DataDir); err == nil {
		d.DataDir = abs
	}
	if d.ControlSocket == "" {
		problems = append(problems, "daemon.control_socket: empty")
	} else {
		if abs, err := filepath.Abs(d.ControlSocket); err == nil {
			d.ControlSocket = abs
		}
		// sockaddr_un.sun_path is 108 bytes with the terminating NUL.
		if len(d.ControlSocket) > 107 {
			problems = append(problems, fmt.Sprintf("daemon.control_socket: %q is longer than a unix socket path may be (107 bytes)", d.ControlSocket))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// decodeHook converts configuration values: strings with a unit to
// durations (a bare number is refused: "30" is not 30 nanoseconds).
func decodeHook() mapstructure.DecodeHookFunc {
	durationType := reflect.TypeOf(time.Duration(0))
	return mapstructure.ComposeDecodeHookFunc(
		func(f reflect.Type, t reflect.Type, data any) (any, error) {
			if t != durationType {
				return data, nil
			}
			switch x := data.(type) {
			case string:
				d, err := time.ParseDuration(strings.TrimSpace(x))
				if err != nil {
					return nil, fmt.Errorf("%q is not a duration such as 30s, 500ms or 1h", x)
				}
				return d, nil
			case time.Duration:
				return x, nil
			case int, int64, uint64, float64, int32, uint32:
				return nil, fmt.Errorf("%v has no unit (write a duration such as %vs)", x, x)
			}
			return data, nil
		},
		mapstructure.StringToSliceHookFunc(","),
	)
}

// formatDecodeError rewrites mapstructure's errors (target.DecodeProblems)
// as one "key: problem" line per problem, with a hint for unknown keys, a
// plainer text for values that do not parse, and the environment
// variable when one set the key.
func formatDecodeError(err error) string {
	var lines []string
	for _, p := range target.DecodeProblems(err).Problems {
		var de *mapstructure.DecodeError
		switch {
		case errors.Is(p.Err, target.ErrUnknownKey):
			lines = append(lines, p.Field+": unknown key (see configs/nvmetd.yaml for every setting)")
		case errors.As(p.Err, &de):
			msg := p.Reason
			var pe *mapstructure.ParseError
			if errors.As(de.Unwrap(), &pe) {
				msg = fmt.Sprintf("%q is not a valid %s", fmt.Sprint(pe.Value), pe.Expected.Type())
			}
			if env := envFor(p.Field); env != "" && os.Getenv(env) != "" {
				msg += " (from " + env + ")"
			}
			lines = append(lines, p.Field+": "+msg)
		default:
			lines = append(lines, p.Reason)
		}
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n")
}

// envFor returns the environment variable that sets key, or "".
func envFor(key string) string {
	for _, f := range daemonFlags {
		if f.key == key {
			return f.env
		}
	}
	if slices.Contains(scalarEnvKeys(), key) {
		return envName(key)
	}
	return ""
}

// applyListen replaces the ports by one per listen address ("host:port",
// "host" for port 4420, "[v6]:port"), numbered from 1, each with the other
// settings of the first configured port (or serving every subsystem when
// there is none).
func applyListen(cfg *target.Config, addrs []string) error {
	var tmpl target.PortConfig
	if len(cfg.Ports) > 0 {
		tmpl = cfg.Ports[0]
	} else {
		for _, s := range cfg.Subsystems {
			tmpl.Subsystems = append(tmpl.Subsystems, s.NQN)
		}
	}
	ports := make([]target.PortConfig, 0, len(addrs))
	for i, a := range addrs {
		host, svc := a, nvmeof.DefaultPort
		if _, err := netip.ParseAddr(a); err != nil {
			h, p, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("--listen/NVMETD_LISTEN: %q is not host:port or an IP address", a)
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("--listen/NVMETD_LISTEN: %q: port %q is not a number", a, p)
			}
			host, svc = h, n
		}
		p := tmpl
		p.ID = uint16(i + 1)
		p.Address, p.ServiceID = host, svc
		p.Subsystems = slices.Clone(tmpl.Subsystems)
		p.Referrals = slices.Clone(tmpl.Referrals)
		ports = append(ports, p)
	}
	cfg.Ports = ports
	return nil
}

// builtinConfig is the configuration used without a configuration file:
// one port on 127.0.0.1:4420 serving one subsystem that allows any host,
// with one namespace on a sparse file.
func builtinConfig(nqn, image, size string) target.Config {
	return target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: nvmeof.DefaultPort, Subsystems: []string{nqn}}},
		Subsystems: []target.SubsystemConfig{{
			NQN:          nqn,
			AllowAnyHost: true,
			Namespaces: []target.NamespaceConfig{{
				NSID:    1,
				Backend: target.BackendConfig{Kind: string(backend.KindFile), Path: image, Size: size, CreateDirs: true},
			}},
		}},
	}
}

// machineIDFiles are where the machine ID is read from (machine-id(5)).
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// defaultSubsystemNQN is the NQN of the built-in default subsystem, of the
// UUID form, unique per machine and stable: the UUID is derived from the
// machine ID, or where there is none, generated once and kept in the data
// directory (written only if persist). It must differ between machines: a
// host connecting to two targets with one NQN would take them for two
// paths to one subsystem.
func defaultSubsystemNQN(idFiles []string, dataDir string, persist bool) (string, error) {
	for _, f := range idFiles {
		b, err := os.ReadFile(f)
		if id := strings.TrimSpace(string(b)); err == nil && len(id) >= 32 {
			sum := sha256.Sum256([]byte("nvmetd default subsystem\x00" + id))
			var u [16]byte
			copy(u[:], sum[:16])
			u[6] = u[6]&0x0F | 0x80 // version 8: custom (RFC 9562 §5.8)
			u[8] = u[8]&0x3F | 0x80 // RFC 9562 variant
			return nvmeof.UUIDNQN(u), nil
		}
	}
	idFile := filepath.Join(dataDir, "default-subsystem.uuid")
	if b, err := os.ReadFile(idFile); err == nil {
		if u, err := nvmeof.ParseUUID(strings.TrimSpace(string(b))); err == nil {
			return nvmeof.UUIDNQN(u), nil
		}
		return "", fmt.Errorf("%s: not a UUID; delete it to generate a new one", idFile)
	}
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", err
	}
	u[6] = u[6]&0x0F | 0x40 // version 4: random
	u[8] = u[8]&0x3F | 0x80
	if persist {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return "", fmt.Errorf("data directory: %w", err)
		}
		if err := os.WriteFile(idFile, []byte(nvmeof.FormatUUID(u)+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("default subsystem UUID: %w", err)
		}
	}
	return nvmeof.UUIDNQN(u), nil
}

// ensureImage creates the default namespace's image, sparse, if it does not
// exist, and its directory. It reports whether it created the file.
func ensureImage(path string, size int64) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("data directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("default namespace image: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(path)
		return false, fmt.Errorf("default namespace image: %w", err)
	}
	return true, f.Close()
}
