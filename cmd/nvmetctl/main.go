// Command nvmetctl manages a running nvmetd through its control socket
// (the management API of docs/api.yaml), in the vocabulary of nvmetcli
// (ls, save, restore, clear) and SPDK's rpc.py (subsystems, namespaces,
// listeners, hosts, nvmf_get_stats): every change is applied as a reload
// would apply it, and --persist writes it into the configuration file.
// nvmetcli's config.json is imported (restore) and exported (export).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/internal/version"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the daemon refused, or could not be reached
	exitUsage   = 2 // bad command line
)

// Default paths, as nvmetd's (target/daemon/flags.go).
const (
	defaultConfigFile = "/etc/nvmetd/nvmetd.yaml"
	rootControlSocket = "/run/nvmetd/nvmetd.sock"
	controlSocketName = "nvmetd.sock"
)

// app is one run of nvmetctl: the global flags and the output.
type app struct {
	socket  string
	config  string
	output  string
	timeout time.Duration
	persist bool
	// groupVersion, if set, is the version of the gateway group's
	// configuration a change is based on (?group_version=N): refused
	// (409) if another change was stored since.
	groupVersion uint64
	// group: the change is for the gateway group (refused unless the
	// daemon holds the group's configuration in RADOS), based on the
	// stored version unless groupVersion says which.
	group  bool
	stdout io.Writer
	stderr io.Writer
	// in is standard input (tests set it; nil: os.Stdin).
	in io.Reader
	// running is set once a command's own code runs: an error from then on
	// is a failure (1), before it a usage error (2).
	running bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs nvmetctl with args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int { return runIn(args, nil, stdout, stderr) }

// runIn is run with stdin as standard input (nil: os.Stdin).
func runIn(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, in: stdin}
	root := a.rootCommand()
	root.SetArgs(rpcArgs(args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ae *ctlclient.Error
	if !errors.As(err, &ae) {
		fmt.Fprintln(stderr, "nvmetctl:", err)
	} else {
		// The message repeats each problem; they are printed once, below
		// it, with the API's field and the configuration's.
		msg := ae.Message
		var lines []string
		for _, p := range ae.Problems {
			switch {
			case p.Field != "" && p.ConfigField != "" && p.ConfigField != p.Field:
				lines = append(lines, fmt.Sprintf("%s (%s): %s", p.Field, p.ConfigField, p.Reason))
			case p.Field != "":
				lines = append(lines, fmt.Sprintf("%s: %s", p.Field, p.Reason))
			default:
				continue
			}
			for _, f := range []string{p.ConfigField, p.Field} {
				if f != "" {
					msg = strings.Replace(msg, f+": "+p.Reason, "", 1)
				}
			}
		}
		var kept []string
		for _, l := range strings.Split(msg, "\n") {
			if strings.TrimSpace(l) != "" {
				kept = append(kept, strings.TrimRight(l, " "))
			}
		}
		if len(kept) == 0 {
			kept = []string{"refused, nothing changed:"}
		}
		fmt.Fprintln(stderr, "nvmetctl:", strings.Join(kept, "\n"))
		for _, l := range lines {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
		if ae.Applied {
			fmt.Fprintln(stderr, "  (the change itself was applied)")
		}
	}
	if !a.running {
		return exitUsage
	}
	return exitFailure
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "nvmetctl",
		Short: "manage a running nvmetd (ports, subsystems, namespaces, hosts, ANA, statistics)",
		Long: "nvmetctl talks to nvmetd's control socket. Every change is applied as a reload of the configuration file " +
			"would apply it (same validation, same notices to connected hosts) or refused naming the field, changing nothing. " +
			"Changes are in memory until saved (--persist on the change, or nvmetctl save); a SIGHUP re-reads the file. " +
			"SPDK rpc.py's method names work as commands too (nvmf_get_stats, nvmf_create_subsystem, nvmf_subsystem_add_ns, ...).",
		Version:       version.Line("nvmetctl"),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if a.output != "normal" && a.output != "json" {
				return fmt.Errorf("--output %q is not normal or json", a.output)
			}
			a.running = true
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	f := root.PersistentFlags()
	f.StringVar(&a.socket, "socket", "", "control socket (default: $NVMETD_CONTROL_SOCKET, else daemon.control_socket of the configuration file, else "+rootControlSocket+" as root or $XDG_RUNTIME_DIR/"+controlSocketName+")")
	f.StringVar(&a.config, "config", "", "nvmetd configuration file to take daemon.control_socket from (default "+defaultConfigFile+" if it exists)")
	f.StringVarP(&a.output, "output", "o", "normal", "output format: normal or json")
	f.DurationVar(&a.timeout, "timeout", 90*time.Second, "how long to wait for the daemon (a removed namespace drains for up to 30s)")
	f.BoolVar(&a.persist, "persist", false, "also write the change into the configuration file (atomically)")
	f.BoolVar(&a.group, "group", false, "a change for the whole gateway group (its configuration in RADOS, gateway.group_config: rados): refused if this nvmetd holds none; based on the stored version (or --group-version)")
	f.Uint64Var(&a.groupVersion, "group-version", 0, "in a gateway group whose configuration is in RADOS: the version a change is based on (refused if another change was stored since; see nvmetctl group)")
	root.AddCommand(a.lsCommand(), a.saveCommand(), a.restoreCommand(), a.clearCommand(), a.exportCommand(),
		a.subsystemCommand(), a.namespaceCommand(), a.portCommand(), a.hostCommand(), a.anaCommand(),
		a.logLevelCommand(), a.controllersCommand(), a.queuesCommand(), a.groupCommand(), a.gatewayCommand())
	return root
}

// socketPath finds the control socket: the flag, $NVMETD_CONTROL_SOCKET,
// the configuration file's daemon.control_socket, else nvmetd's default.
func (a *app) socketPath() (string, error) {
	if a.socket != "" {
		return a.socket, nil
	}
	if s := os.Getenv("NVMETD_CONTROL_SOCKET"); s != "" {
		return s, nil
	}
	file, explicit := a.config, a.config != ""
	if !explicit {
		if f := os.Getenv("NVMETD_CONFIG"); f != "" {
			file, explicit = f, true
		} else {
			file = defaultConfigFile
		}
	}
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		var doc struct {
			Daemon struct {
				ControlSocket string `yaml:"control_socket"`
			} `yaml:"daemon"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil && explicit {
			return "", fmt.Errorf("config file %s: %w", file, err)
		}
		if doc.Daemon.ControlSocket != "" {
			return doc.Daemon.ControlSocket, nil
		}
	case explicit:
		return "", fmt.Errorf("config file: %w", err)
	}
	if os.Geteuid() == 0 {
		return rootControlSocket, nil
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, controlSocketName), nil
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nvmetd-%d", os.Getuid()), controlSocketName), nil
}

// call sends one request to the daemon.
func (a *app) call(method, path string, query url.Values, body, out any) error {
	sock, err := a.socketPath()
	if err != nil {
		return err
	}
	c := ctlclient.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	return c.Do(ctx, method, path, query, body, out)
}

// change sends a change (with ?persist=true under --persist) and prints
// what changed.
func (a *app) change(method, path string, body any) error {
	q := url.Values{}
	if a.persist {
		q.Set("persist", "true")
	}
	base := a.groupVersion
	if a.group && base == 0 {
		var st ctlclient.GroupStatus
		if err := a.call("GET", "/v1/group", nil, nil, &st); err != nil {
			return err
		}
		if st.Version == 0 {
			return fmt.Errorf("--group: gateway group %s keeps its configuration in each gateway's file: this nvmetd holds no gateway group configuration in RADOS (gateway.group_config: rados), so a change for the whole group is refused", st.Group)
		}
		base = st.Version
	}
	if base != 0 {
		q.Set("group_version", strconv.FormatUint(base, 10))
	}
	var raw json.RawMessage
	if err := a.call(method, path, q, body, &raw); err != nil {
		return err
	}
	if a.output == "json" {
		_, err := a.stdout.Write(raw)
		return err
	}
	var res ctlclient.ChangeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return err
	}
	a.printChange(&res)
	return nil
}

func (a *app) printChange(res *ctlclient.ChangeResult) {
	if len(res.Changes) == 0 {
		fmt.Fprintln(a.stdout, "no changes")
	}
	for _, c := range res.Changes {
		fmt.Fprintln(a.stdout, c)
	}
	if res.Persisted {
		fmt.Fprintf(a.stdout, "saved to %s\n", res.File)
	}
	if res.GroupVersion != 0 {
		fmt.Fprintf(a.stdout, "gateway group configuration: version %d\n", res.GroupVersion)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(a.stderr, "warning:", w)
	}
}

// get fetches path and prints it as JSON (-o json) or with text.
func (a *app) get(path string, out any, text func()) error {
	var raw json.RawMessage
	if err := a.call("GET", path, nil, nil, &raw); err != nil {
		return err
	}
	if a.output == "json" {
		_, err := a.stdout.Write(raw)
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return err
	}
	text()
	return nil
}

// esc escapes a name for a path segment.
func esc(s string) string { return url.PathEscape(s) }

// stdin is the standard input keys are read from.
func (a *app) stdin() io.Reader {
	if a.in != nil {
		return a.in
	}
	return os.Stdin
}
