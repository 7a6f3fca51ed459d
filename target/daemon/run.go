package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/target"
)

// Main is the nvmetd program (cmd/nvmetd): args are its arguments
// without the program name, id this machine's host identity (the built-in
// default configuration admits that host); it returns the exit code. A
// process calls it once.
func Main(args []string, stdout, stderr io.Writer, id HostIdentity) int {
	hostIdentity = id
	return run(args, stdout, stderr)
}

// run is the whole program; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runStatus(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "trace" {
		return runTrace(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "reload" {
		return runReload(args[1:], stdout, stderr)
	}
	o, fs, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "nvmetd: %v (see nvmetd --help)\n", err)
		return exitUsage
	}
	if o.version {
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	}
	target.DefaultFirmwareRevision = firmwareRevision(programVersion())

	if o.checkConfig {
		return runCheckConfig(o, fs, stdout, stderr)
	}

	// Catch signals before anything else: an early SIGHUP must not kill
	// the daemon, and is applied once it runs.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	out := detectLogOutput()
	lc, err := loadConfig(o, fs, true)
	if err != nil {
		// Log with what the flags and environment say, since the file's
		// daemon section may be what is broken.
		format := envOrFlag(fs, "log-format", "NVMETD_LOG_FORMAT", "auto")
		if format != "console" && format != "json" {
			format = "auto"
		}
		log := newLogger(zap.NewAtomicLevelAt(zapcore.InfoLevel), out.encoding(format), out, zapcore.Lock(zapcore.AddSync(stderr)))
		log.Error("invalid configuration:\n" + indent(err.Error()))
		_ = log.Sync()
		return exitConfig
	}
	lvl, _ := zapcore.ParseLevel(lc.Daemon.LogLevel)
	level := zap.NewAtomicLevelAt(lvl)
	log := newLogger(level, out.encoding(lc.Daemon.LogFormat), out, zapcore.Lock(zapcore.AddSync(stderr)))
	defer func() { _ = log.Sync() }()

	wd, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring the systemd watchdog settings", zap.Error(err))
		wd = 0
	}
	d := &daemon{
		log:      log,
		level:    level,
		load:     func() (*loadedConfig, error) { return loadConfig(o, fs, true) },
		notify:   sdNotify(log),
		signals:  sigs,
		watchdog: wd,
		cur:      lc,
	}
	return d.run()
}

// envOrFlag returns a flag's value if set, else an environment variable's,
// else def.
func envOrFlag(fs *pflag.FlagSet, flag, env, def string) string {
	if f := fs.Lookup(flag); f != nil && f.Changed {
		return f.Value.String()
	}
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// indent indents every line after the first of a multi-line message.
func indent(s string) string {
	return strings.ReplaceAll(s, "\n", "\n  ")
}
