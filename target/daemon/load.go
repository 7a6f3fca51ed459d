package daemon

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
	"syscall"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/target"
)

// daemonConfig is the "daemon" section of the configuration file: settings
// of the program rather than of the target.
type daemonConfig struct {
	// DataDir holds the built-in default's namespace image, subsystem
	// UUID and host key.
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
	Gateway       *gwtarget.Config `mapstructure:"gateway"`
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
	Gateway *gwtarget.Config
	// Target has defaults applied and is valid.
	Target *target.Config
	// Warnings are target.Config.Warnings.
	Warnings []string
	// DefaultImage and DefaultSize describe the default namespace's image
	// file, created if missing; DefaultImage is "" unless the built-in
	// default configuration is in use.
	DefaultImage string
	DefaultSize  int64
	// DefaultHostNQN and DefaultHostKey are the host the built-in
	// default admits and its DH-HMAC-CHAP key file (created if missing).
	DefaultHostNQN, DefaultHostKey string
	// DefaultImageCreated is set when this start created DefaultImage
	// (a new, unformatted namespace).
	DefaultImageCreated bool
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
		hostNQN, warning, err := defaultHostNQN(persist)
		if err != nil {
			return nil, err
		}
		if warning != "" {
			lc.Warnings = append(lc.Warnings, warning)
		}
		lc.DefaultImage = filepath.Join(lc.Daemon.DataDir, defaultImageName)
		lc.DefaultSize = size
		lc.DefaultHostNQN = hostNQN
		lc.DefaultHostKey = filepath.Join(lc.Daemon.DataDir, defaultHostKeyName)
		builtin := builtinConfig(nqn, hostNQN, lc.DefaultHostKey, lc.DefaultImage, backend.FormatSize(size))
		cfg.Ports, cfg.Subsystems, cfg.Hosts = builtin.Ports, builtin.Subsystems, builtin.Hosts
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
		fc.Gateway.ApplyDefaults()
		if err := fc.Gateway.Validate(&cfg); err != nil {
			return nil, fmt.Errorf("%s:\n%w", where, err)
		}
		lc.Gateway = fc.Gateway
	}
	lc.Target = &cfg
	lc.Warnings = append(append(lc.Warnings, cfg.Warnings()...), unknownEnv(os.Environ())...)
	if w := secretFileWarning(file, &cfg); w != "" {
		lc.Warnings = append(lc.Warnings, w)
	}
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

// exampleConfig is where the Debian package installs the commented example
// configuration that documents every setting.
var exampleConfig = "/usr/share/doc/nvmetd/examples/nvmetd.yaml"

// exampleConfigHint says where every setting is documented: the installed
// example when there is one (never a path of the source tree, which an
// installed nvmetd has not: issue 23.8), else the manual page.
func exampleConfigHint() string {
	if _, err := os.Stat(exampleConfig); err == nil {
		return "every setting is documented in " + exampleConfig
	}
	return "every setting is documented in the commented example configuration nvmetd.yaml; the package installs it as " + exampleConfig
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
			lines = append(lines, p.Field+": unknown key ("+exampleConfigHint()+")")
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

// Files of the built-in default in the data directory.
const (
	defaultImageName   = "default-ns1.img"
	defaultUUIDName    = "default-subsystem.uuid"
	defaultHostKeyName = "default-host.key"
)

// builtinConfig is the configuration used without a configuration file:
// one port on 127.0.0.1:4420 serving one subsystem, with one namespace on
// a sparse file. Loopback is no boundary between local users (and the Go
// host needs no privilege), so the subsystem admits only this machine's
// host NQN, and only after DH-HMAC-CHAP with the key generated into the
// data directory (keyFile, mode 0600: root, or the daemon's user, can read
// it; nvmeof connect on this machine picks it up).
func builtinConfig(nqn, hostNQN, keyFile, image, size string) target.Config {
	return target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: nvmeof.DefaultPort, Subsystems: []string{nqn}}},
		Hosts: []target.HostConfig{{NQN: hostNQN, Description: "this machine (built-in default)", DHCHAPKey: dhchapkey.FilePrefix + keyFile}},
		Subsystems: []target.SubsystemConfig{{
			NQN:          nqn,
			AllowedHosts: []string{hostNQN},
			AuthRequired: true,
			Namespaces: []target.NamespaceConfig{{
				NSID:    1,
				Backend: target.BackendConfig{Kind: string(backend.KindFile), Path: image, Size: size, CreateDirs: true},
			}},
		}},
	}
}

// HostIdentity returns this machine's host NQN, the one nvmeof and
// nvme-cli present, and what became of it (initiator.Identity's NQN and
// Persisted). With persist, if neither /etc/nvme/hostnqn nor
// /etc/nvme/hostid exists, the derived identity is saved (as nvme-cli does
// on first use), so that the NQN stays the one the default subsystem
// admits; Persisted starts with "not saved" when it could not be.
// cmd/nvmetd wires the initiator's (initiator.PersistentHostIdentity): the
// target's side does not import the host's.
type HostIdentity func(persist bool) (nqn, persisted string, err error)

// hostIdentity is Main's; tests replace it.
var hostIdentity HostIdentity

// defaultHostNQN is this machine's host NQN (hostIdentity), with a warning
// when persist could not save it.
func defaultHostNQN(persist bool) (nqn, warning string, err error) {
	if hostIdentity == nil {
		return "", "", errors.New("this machine's host NQN: no host identity wired (daemon.Main's)")
	}
	nqn, persisted, err := hostIdentity(persist)
	if err != nil {
		return "", "", fmt.Errorf("this machine's host NQN: %w", err)
	}
	if persist && strings.HasPrefix(persisted, "not saved") {
		warning = fmt.Sprintf("the built-in default admits host %s, which is %s: hosts may present another NQN", nqn, persisted)
	}
	return nqn, warning, nil
}

// machineIDFiles are where the machine ID is read from (machine-id(5)).
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// defaultSubsystemNQN is the NQN of the built-in default subsystem, of the
// UUID form, unique per instance and stable: a random UUID generated once
// into <dataDir>/default-subsystem.uuid (written only if persist). It must
// differ between targets: a host connecting to two targets with one NQN
// takes them for two paths to one subsystem; VM clones share a machine ID,
// and two instances on one machine share it too.
//
// A data directory made by an earlier version (its image exists, the UUID
// file does not) keeps the NQN derived from the machine ID, and writes it
// to the file: the hosts that know it keep seeing the same subsystem.
func defaultSubsystemNQN(idFiles []string, dataDir string, persist bool) (string, error) {
	idFile := filepath.Join(dataDir, defaultUUIDName)
	b, err := os.ReadFile(idFile)
	if err == nil {
		u, err := nvmeof.ParseUUID(strings.TrimSpace(string(b)))
		if err != nil {
			return "", fmt.Errorf("%s: not a UUID; delete it to generate a new one", idFile)
		}
		return nvmeof.UUIDNQN(u), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("default subsystem UUID: %w", err)
	}
	var u [16]byte
	derived := false
	if _, err := os.Stat(filepath.Join(dataDir, defaultImageName)); err == nil {
		u, derived = machineDerivedUUID(idFiles)
	}
	if !derived {
		if _, err := rand.Read(u[:]); err != nil {
			return "", err
		}
		u[6] = u[6]&0x0F | 0x40 // version 4: random
		u[8] = u[8]&0x3F | 0x80
	}
	if persist {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return "", fmt.Errorf("data directory: %w", err)
		}
		f, err := createPrivate(idFile)
		if err == nil {
			_, err = f.WriteString(nvmeof.FormatUUID(u) + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return "", fmt.Errorf("default subsystem UUID: %w", err)
		}
	}
	return nvmeof.UUIDNQN(u), nil
}

// machineDerivedUUID is the default subsystem's UUID of versions before
// 0.1.0: derived from the machine ID.
func machineDerivedUUID(idFiles []string) ([16]byte, bool) {
	for _, f := range idFiles {
		b, err := os.ReadFile(f)
		if id := strings.TrimSpace(string(b)); err == nil && len(id) >= 32 {
			sum := sha256.Sum256([]byte("nvmetd default subsystem\x00" + id))
			var u [16]byte
			copy(u[:], sum[:16])
			u[6] = u[6]&0x0F | 0x80 // version 8: custom (RFC 9562 §5.8)
			u[8] = u[8]&0x3F | 0x80 // RFC 9562 variant
			return u, true
		}
	}
	return [16]byte{}, false
}

// ensureHostKey creates the built-in default's DH-HMAC-CHAP host key if
// it does not exist: one line, a DHHC-1 secret as nvme gen-dhchap-key
// makes it (32 random bytes, no transformation), mode 0600, created with
// O_EXCL|O_NOFOLLOW and owned by the daemon's user. It reports whether it
// created the file.
func ensureHostKey(path, hostNQN string) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("data directory: %w", err)
	}
	key, err := auth.GenerateKey(auth.KeyOptions{NQN: hostNQN}, rand.Reader)
	if err != nil {
		return false, fmt.Errorf("default host key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil // dhchapkey checks it when the target loads it
	}
	if err != nil {
		return false, fmt.Errorf("default host key: %w", err)
	}
	_, err = f.WriteString(key + "\n")
	if err == nil {
		err = f.Chmod(0o600)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("default host key %s: %w", path, err)
	}
	return true, nil
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
