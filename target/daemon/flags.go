package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the daemon failed, or --check-config found the configuration invalid
	exitUsage   = 2 // bad command line
	// exitDegraded is `nvmetd status` of a daemon that runs degraded: a
	// namespace failed to open, a port does not listen.
	exitDegraded = 3
	// exitFenced: another gateway of the group fenced this one (its RADOS
	// clients are blocklisted); restarted, it gets new ones.
	exitFenced = 75 // EX_TEMPFAIL
	exitConfig = 78 // EX_CONFIG: the daemon's configuration is invalid (the unit does not restart on it)
)

// Default paths.
const (
	defaultConfigFile    = "/etc/nvmetd/nvmetd.yaml"
	rootDataDir          = "/var/lib/nvmetd"
	rootControlSocket    = "/run/nvmetd/nvmetd.sock"
	controlSocketName    = "nvmetd.sock"
	defaultNamespaceSize = "1GiB"
)

// options are the daemon's command line.
type options struct {
	// configFile is --config or NVMETD_CONFIG; configExplicit says whether
	// one of them was given (then the file must exist).
	configFile     string
	configExplicit bool
	checkConfig    bool
	version        bool
	// listen is --listen (or NVMETD_LISTEN): listen addresses replacing the
	// configured ports' addresses.
	listen []string
	// output is --output: normal or json (for --check-config).
	output string
	// defaultSize is --default-size (or NVMETD_DEFAULT_SIZE): the size of
	// the default namespace when there is no configuration file.
	defaultSize string
}

// newFlagSet declares the daemon's flags. Flags bound to configuration keys
// (daemon.*) are read through viper, so that a flag overrides the
// environment, which overrides the file.
func newFlagSet(o *options, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nvmetd", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.StringVar(&o.configFile, "config", "", "configuration file (default "+defaultConfigFile+" if it exists, else a built-in default: one 1GiB file namespace on 127.0.0.1:4420)")
	fs.String("data-dir", "", "directory of the default namespace's image (default "+rootDataDir+" as root, else $XDG_STATE_HOME/nvmetd or ~/.local/state/nvmetd)")
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), console, json")
	fs.Duration("shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight I/O to drain before closing connections")
	fs.String("control-socket", "", "unix socket that 'nvmetd status' talks to (default "+rootControlSocket+" as root, else $XDG_RUNTIME_DIR/"+controlSocketName+")")
	fs.Duration("health-log-interval", time.Hour, "how often backend health is logged (changes of a critical warning are logged at once)")
	fs.StringSliceVar(&o.listen, "listen", nil, "listen on these `host:port` addresses (comma-separated) instead of the configured ports' addresses")
	fs.StringVar(&o.defaultSize, "default-size", defaultNamespaceSize, "size of the default namespace when there is no configuration file")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate the configuration and what it opens (paths, devices, sizes), print the effective configuration and exit (0 valid, 1 invalid)")
	fs.StringVarP(&o.output, "output", "o", "normal", "output format of --check-config: normal or json")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage:
  nvmetd [flags]                   run the NVMe-oF target
  nvmetd --check-config [-o json]  check the configuration, print the effective one
  nvmetd status [-o normal|json]   show the running daemon's status (exit 3 if degraded)
  nvmetd reload                    reload the configuration, wait for the verdict (exit 1 if refused)
  nvmetd trace start|stop|status   a wire trace (pcap) of selected queues (nvmetd trace --help)

flags:
%s
environment (a flag overrides its variable; a variable overrides the file):
%s
`, fs.FlagUsages(), envUsage())
	}
	return fs
}

// parseFlags parses the daemon's command line. It returns pflag.ErrHelp for
// --help.
func parseFlags(args []string, stderr io.Writer) (*options, *pflag.FlagSet, error) {
	o := &options{}
	fs := newFlagSet(o, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected argument %q (the only command is status)", fs.Arg(0))
	}
	if err := checkDaemonFlags(func(name string) (string, bool) {
		if f := fs.Lookup(name); f != nil && f.Changed {
			return f.Value.String(), true
		}
		return "", false
	}); err != nil {
		return nil, nil, err
	}
	if o.output != "normal" && o.output != "json" {
		return nil, nil, fmt.Errorf("--output %q is not normal or json", o.output)
	}
	o.configExplicit = fs.Changed("config")
	if !o.configExplicit {
		if f, ok := os.LookupEnv("NVMETD_CONFIG"); ok && f != "" {
			o.configFile, o.configExplicit = f, true
		}
	}
	if !fs.Changed("listen") {
		if l := os.Getenv("NVMETD_LISTEN"); l != "" {
			o.listen = splitList(l)
		}
	}
	if !fs.Changed("default-size") {
		if s := os.Getenv("NVMETD_DEFAULT_SIZE"); s != "" {
			o.defaultSize = s
		}
	}
	return o, fs, nil
}

// splitList splits a comma-separated list, dropping empty elements.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// defaultConfigPath is defaultConfigFile; tests point it elsewhere.
var defaultConfigPath = defaultConfigFile

// isRoot reports whether the process runs as root.
func isRoot() bool { return os.Geteuid() == 0 }

// firstDir returns the first of systemd's colon-separated directory lists
// ($STATE_DIRECTORY, $RUNTIME_DIRECTORY, $CONFIGURATION_DIRECTORY).
func firstDir(env string) string {
	d, _, _ := strings.Cut(os.Getenv(env), ":")
	return d
}

// resolveConfigFile returns the configuration file to read, or "" for the
// built-in default.
func resolveConfigFile(o *options) (string, error) {
	if o.configExplicit {
		if _, err := os.Stat(o.configFile); err != nil {
			return "", fmt.Errorf("config file: %w", err)
		}
		return o.configFile, nil
	}
	candidates := []string{defaultConfigPath}
	if d := firstDir("CONFIGURATION_DIRECTORY"); d != "" {
		candidates = append([]string{filepath.Join(d, "nvmetd.yaml")}, candidates...)
	}
	for _, f := range candidates {
		if _, err := os.Stat(f); err == nil {
			return f, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("config file: %w", err)
		}
	}
	return "", nil
}

// defaultDataDir is where the default namespace lives: systemd's
// $STATE_DIRECTORY, else /var/lib/nvmetd for root when it is writable (or
// can be created), else $XDG_STATE_HOME/nvmetd, else ~/.local/state/nvmetd.
func defaultDataDir() string {
	if d := firstDir("STATE_DIRECTORY"); d != "" {
		return d
	}
	if isRoot() && writable(rootDataDir) {
		return rootDataDir
	}
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "nvmetd")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "state", "nvmetd")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nvmetd-%d", os.Getuid()), "state")
}

// writable reports whether dir is writable, or, if it does not exist,
// whether its nearest existing parent is (so it can be created).
func writable(dir string) bool {
	for {
		err := unix.Access(dir, unix.W_OK)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.ENOENT) {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}

// defaultControlSocket is the control socket path: systemd's
// $RUNTIME_DIRECTORY/nvmetd.sock, else /run/nvmetd/nvmetd.sock for root,
// else $XDG_RUNTIME_DIR/nvmetd.sock, else a per-user directory in /tmp.
func defaultControlSocket() string {
	if d := firstDir("RUNTIME_DIRECTORY"); d != "" {
		return filepath.Join(d, controlSocketName)
	}
	if isRoot() {
		return rootControlSocket
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, controlSocketName)
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nvmetd-%d", os.Getuid()), controlSocketName)
}
