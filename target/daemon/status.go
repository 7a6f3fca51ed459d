package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/nvmetd/nvmetd/backend"
)

// runStatus is `nvmetd status`: it asks the running daemon over the control
// socket and prints its status.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("nvmetd status", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	output := fs.StringP("output", "o", "normal", "output format: normal or json")
	socket := fs.String("socket", "", "control socket (default: $NVMETD_CONTROL_SOCKET, else daemon.control_socket of the configuration file, else "+rootControlSocket+" as root or $XDG_RUNTIME_DIR/"+controlSocketName+")")
	config := fs.String("config", "", "configuration file to take daemon.control_socket from (default "+defaultConfigFile+" if it exists)")
	reports := fs.Bool("health-report", false, "include the device health reports (SMART) of block namespaces")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the daemon")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: nvmetd status [flags]\n\nexit status: 0 healthy, 1 no answer, 2 usage, 3 degraded (nothing served, a namespace failed, a port down, the last reload refused)\n\nflags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return exitOK
		}
		fmt.Fprintf(stderr, "nvmetd status: %v (see nvmetd status --help)\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nvmetd status: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *output == "text" { // the name before 0.1
		*output = "normal"
	}
	if *output != "normal" && *output != "json" {
		fmt.Fprintf(stderr, "nvmetd status: --output %q is not normal or json\n", *output)
		return exitUsage
	}
	path, err := statusSocket(*socket, *config, fs.Changed("config"))
	if err != nil {
		fmt.Fprintln(stderr, "nvmetd status:", err)
		return exitFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := fetchStatus(ctx, path, *reports)
	if err != nil {
		fmt.Fprintln(stderr, "nvmetd status:", err)
		return exitFailure
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintln(stderr, "nvmetd status:", err)
			return exitFailure
		}
	} else {
		renderStatus(stdout, st, time.Now())
	}
	if st.Health == healthDegraded {
		return exitDegraded
	}
	return exitOK
}

// statusSocket finds the daemon's control socket: the flag, else
// $NVMETD_CONTROL_SOCKET, else the configuration file's
// daemon.control_socket, else the default.
func statusSocket(flag, config string, configExplicit bool) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if s := os.Getenv("NVMETD_CONTROL_SOCKET"); s != "" {
		return s, nil
	}
	o := &options{configFile: config, configExplicit: configExplicit}
	if !configExplicit {
		if f := os.Getenv("NVMETD_CONFIG"); f != "" {
			o.configFile, o.configExplicit = f, true
		}
	}
	file, err := resolveConfigFile(o)
	if err != nil {
		return "", err
	}
	if file != "" {
		// Only this key matters here: a configuration being edited may be
		// invalid while the daemon still runs the previous one.
		v := viper.New()
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err == nil {
			if s := v.GetString("daemon.control_socket"); s != "" {
				return s, nil
			}
		} else if configExplicit {
			return "", fmt.Errorf("config file %s: %w", file, err)
		}
	}
	return defaultControlSocket(), nil
}

// renderStatus prints st for people.
func renderStatus(w io.Writer, st *daemonStatus, now time.Time) {
	cfg := st.ConfigFile
	if cfg == "" {
		cfg = "built-in default"
	}
	fmt.Fprintf(w, "nvmetd %s, pid %d, %s", st.Version, st.PID, st.State)
	if !st.StartedAt.IsZero() {
		fmt.Fprintf(w, " since %s (%s)", st.StartedAt.Local().Format("2006-01-02 15:04:05"), now.Sub(st.StartedAt).Round(time.Second))
	}
	fmt.Fprintf(w, "\nconfiguration: %s\n", cfg)
	switch {
	case st.Health == healthDegraded || len(st.Problems) > 0:
		fmt.Fprintf(w, "health: DEGRADED\n")
		for _, p := range st.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	case st.HealthError != "":
		fmt.Fprintf(w, "health: UNHEALTHY: %s\n", st.HealthError)
	default:
		fmt.Fprintf(w, "health: ok\n")
	}
	if r := st.LastReload; r != nil {
		at := r.At.Local().Format("2006-01-02 15:04:05")
		if r.Error != "" {
			fmt.Fprintf(w, "last reload: %s FAILED: %s\n", at, r.Error)
		} else {
			fmt.Fprintf(w, "last reload: %s ok (%d changes)\n", at, len(r.Changes))
		}
	}
	if r := st.LastChange; r != nil {
		at := r.At.Local().Format("2006-01-02 15:04:05")
		if r.Error != "" {
			fmt.Fprintf(w, "last change (nvmetctl): %s applied with errors: %s\n", at, r.Error)
		} else {
			fmt.Fprintf(w, "last change (nvmetctl): %s ok (%d changes)\n", at, len(r.Changes))
		}
	}
	if st.Unsaved {
		fmt.Fprintf(w, "unsaved changes: the running configuration differs from the file (nvmetctl save writes it; a reload would undo them)\n")
	}

	fmt.Fprintf(w, "\nPORTS\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  ID\tADDRESS\tSTATE\tCONNECTIONS\tSUBSYSTEMS\n")
	for _, p := range st.Target.Ports {
		state := "listening"
		if !p.Listening {
			state = "down"
			if p.Error != "" {
				state = "down: " + p.Error
			}
		}
		subs := strings.Join(p.Subsystems, " ")
		if subs == "" {
			subs = "(discovery only)"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\n", p.ID, p.Address, state, p.Connections, subs)
	}
	tw.Flush()
	if len(st.Target.Ports) == 0 {
		fmt.Fprintf(w, "  (none)\n")
	}

	fmt.Fprintf(w, "\nSUBSYSTEMS\n")
	if len(st.Target.Subsystems) == 0 {
		fmt.Fprintf(w, "  (none)\n")
	}
	for _, s := range st.Target.Subsystems {
		access := "any host"
		if !s.AllowAnyHost {
			access = fmt.Sprintf("%d allowed hosts", len(s.AllowedHosts))
		}
		fmt.Fprintf(w, "  %s\n    serial %s, model %s, firmware %s, %s, %d controllers\n",
			s.NQN, s.Serial, s.Model, s.FirmwareRevision, access, s.Controllers)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "    NSID\tSTATE\tKIND\tSIZE\tPATH\tHEALTH\n")
		for _, n := range s.Namespaces {
			state := n.State
			if n.Error != "" {
				state += ": " + n.Error
			}
			size := "-"
			if n.Backend.Size > 0 {
				size = backend.FormatSize(n.Backend.Size)
			}
			path := n.Backend.Path
			if path == "" {
				path = "-"
			}
			if n.Backend.ReadOnly {
				path += " (read-only)"
			}
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\t%s\n", n.NSID, state, n.Backend.Kind, size, path, n.Backend.Health.Summary())
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nCONTROLLERS\n")
	if len(st.Target.Controllers) == 0 {
		fmt.Fprintf(w, "  (none)\n")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  CNTLID\tSUBSYSTEM\tHOST\tREMOTE\tIO QUEUES\tKATO\tREADS\tWRITES\tERRORS\tCONNECTED\n")
		for _, c := range st.Target.Controllers {
			sub := c.Subsystem
			if c.Discovery {
				sub = "(discovery)"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", c.CNTLID, sub, c.HostNQN, c.RemoteAddress,
				c.IOQueues, time.Duration(c.KATOMillis)*time.Millisecond,
				ioSummary(c.IO.ReadCommands, c.IO.ReadBytes), ioSummary(c.IO.WriteCommands, c.IO.WriteBytes), c.IO.Errors,
				now.Sub(c.ConnectedAt).Round(time.Second))
		}
		tw.Flush()
	}

	if len(st.Warnings) > 0 {
		fmt.Fprintf(w, "\nWARNINGS\n")
		for _, x := range st.Warnings {
			fmt.Fprintf(w, "  - %s\n", x)
		}
	}
	for _, r := range st.HealthReports {
		fmt.Fprintf(w, "\nHEALTH REPORT %s nsid %d (%s)\n", r.Subsystem, r.NSID, r.Path)
		if r.Error != "" {
			fmt.Fprintf(w, "  %s\n", r.Error)
			continue
		}
		fmt.Fprintf(w, "%s\n", strings.TrimRight(r.Report, "\n"))
	}
}

// ioSummary formats a command count and its bytes: "12 (48KiB)".
func ioSummary(cmds, bytes uint64) string {
	if cmds == 0 {
		return "0"
	}
	return strconv.FormatUint(cmds, 10) + " (" + humanBytes(bytes) + ")"
}

// humanBytes formats a byte count with a binary unit and one decimal.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
