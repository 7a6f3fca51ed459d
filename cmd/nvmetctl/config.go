package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
)

// fetchConfig returns the running configuration.
func (a *app) fetchConfig() (*target.Config, json.RawMessage, error) {
	var raw json.RawMessage
	if err := a.call("GET", "/v1/config", nil, nil, &raw); err != nil {
		return nil, nil, err
	}
	var c target.Config
	if err := target.DecodeJSON(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("the daemon's configuration: %w", err)
	}
	return &c, raw, nil
}

// nsState is what status says of one namespace.
type nsState struct {
	State string `json:"state"`
	Error string `json:"error"`
	Size  int64
	// The identifiers in effect (configured or derived).
	NGUID, UUID, EUI64 string
}

// namespaceStates returns each namespace's state from /v1/status.
func (a *app) namespaceStates() map[string]nsState {
	var st struct {
		Target target.Status `json:"target"`
	}
	out := map[string]nsState{}
	if a.call("GET", "/v1/status", nil, nil, &st) != nil {
		return out
	}
	for _, s := range st.Target.Subsystems {
		for _, n := range s.Namespaces {
			out[fmt.Sprintf("%s/%d", s.NQN, n.NSID)] = nsState{State: n.State, Error: n.Error, Size: n.Backend.Size,
				NGUID: n.NGUID, UUID: n.UUID, EUI64: n.EUI64}
		}
	}
	return out
}

func (a *app) lsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "show the running configuration as a tree (nvmetcli ls)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, raw, err := a.fetchConfig()
			if err != nil {
				return err
			}
			if a.output == "json" {
				_, err := a.stdout.Write(raw)
				return err
			}
			printTree(a.stdout, c, a.namespaceStates())
			return nil
		},
	}
}

// printTree prints c as nvmetcli ls does.
func printTree(w io.Writer, c *target.Config, states map[string]nsState) {
	fmt.Fprintln(w, "o- /")
	fmt.Fprintf(w, "  o- hosts [%d]\n", len(c.Hosts))
	for _, h := range c.Hosts {
		desc := ""
		if h.Description != "" {
			desc = " [" + h.Description + "]"
		}
		fmt.Fprintf(w, "  | o- %s%s\n", h.NQN, desc)
	}
	fmt.Fprintf(w, "  o- ports [%d]\n", len(c.Ports))
	for _, p := range c.Ports {
		trtype := p.Transport
		if trtype == "" {
			trtype = target.TransportRDMA
		}
		fmt.Fprintf(w, "  | o- %d [trtype=%s, traddr=%s, trsvcid=%d, inline_data_size=%d]\n", p.ID, trtype, p.Address, p.ServiceID, p.InlineDataSize)
		fmt.Fprintf(w, "  | | o- ana_groups [%d]\n", len(p.ANAGroups))
		for _, g := range p.ANAGroups {
			fmt.Fprintf(w, "  | | | o- %d [state=%s]\n", g.ID, g.State)
		}
		fmt.Fprintf(w, "  | | o- referrals [%d]\n", len(p.Referrals))
		for _, r := range p.Referrals {
			fmt.Fprintf(w, "  | | | o- %s [portid=%d]\n", r.ListenAddress(), r.PortID)
		}
		fmt.Fprintf(w, "  | | o- subsystems [%d]\n", len(p.Subsystems))
		for _, s := range p.Subsystems {
			fmt.Fprintf(w, "  | |   o- %s\n", s)
		}
	}
	fmt.Fprintf(w, "  o- subsystems [%d]\n", len(c.Subsystems))
	for _, s := range c.Subsystems {
		access := fmt.Sprintf("allow_any_host=%d", b2i(s.AllowAnyHost))
		fmt.Fprintf(w, "    o- %s [serial=%s, model=%s, %s]\n", s.NQN, s.Serial, s.Model, access)
		fmt.Fprintf(w, "      o- allowed_hosts [%d]\n", len(s.AllowedHosts))
		for _, h := range s.AllowedHosts {
			fmt.Fprintf(w, "      | o- %s\n", h)
		}
		fmt.Fprintf(w, "      o- namespaces [%d]\n", len(s.Namespaces))
		for _, n := range s.Namespaces {
			where := n.Backend.Kind
			if n.Backend.Path != "" {
				where += " " + n.Backend.Path
			}
			st := states[fmt.Sprintf("%s/%d", s.NQN, n.NSID)]
			size := n.Backend.Size
			if st.Size > 0 {
				size = backend.FormatSize(st.Size)
			}
			state := st.State
			if state == "" {
				state = "unknown"
			}
			if st.Error != "" {
				state += ": " + st.Error
			}
			fmt.Fprintf(w, "        o- %d [%s, size=%s, ana_grpid=%d, %s]\n", n.NSID, where, size, n.ANAGroup, state)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (a *app) saveCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "save [FILE]",
		Short: "write the running configuration into nvmetd's configuration file, or into FILE (nvmetcli save)",
		Long: "Without FILE the daemon writes its configuration file atomically (sections the API does not change, and their " +
			"comments, are kept). With FILE nvmetctl writes the configuration as nvmetd YAML into FILE (nvmetctl export writes nvmetcli's config.json).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				q := url.Values{}
				if force {
					q.Set("force", "true")
				}
				var res ctlclient.ChangeResult
				if err := a.call("POST", "/v1/save", q, nil, &res); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "saved to %s\n", res.File)
				return nil
			}
			c, _, err := a.fetchConfig()
			if err != nil {
				return err
			}
			out := c.WithoutDefaults()
			doc := map[string]any{"ports": target.EncodeJSON(out.Ports), "subsystems": target.EncodeJSON(out.Subsystems), "hosts": target.EncodeJSON(out.Hosts)}
			b, err := yaml.Marshal(doc)
			if err != nil {
				return err
			}
			return writeOut(args[0], b)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "write even over a configuration file edited since nvmetd read it")
	return cmd
}

// writeOut writes b into path ("-": standard output).
func writeOut(path string, b []byte) error {
	if path == "-" {
		_, err := os.Stdout.Write(b)
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (a *app) exportCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "export [FILE]",
		Short: "write the running configuration as nvmetcli's config.json (to FILE, default standard output)",
		Long: "Settings nvmetcli's config.json cannot hold (memory or null namespaces, read-only, block sizes, host descriptions, ...) " +
			"are named in an error and nothing is written, unless --force (they are then left out, each named in a warning).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := a.fetchConfig()
			if err != nil {
				return err
			}
			// The identifiers hosts see, derived ones included: kernel
			// nvmet restored from this file reports the same namespaces.
			states := a.namespaceStates()
			for i := range c.Subsystems {
				sc := &c.Subsystems[i]
				for j := range sc.Namespaces {
					n := &sc.Namespaces[j]
					st := states[fmt.Sprintf("%s/%d", sc.NQN, n.NSID)]
					if n.NGUID == "" {
						n.NGUID = st.NGUID
					}
					if n.UUID == "" {
						n.UUID = st.UUID
					}
				}
			}
			nc, err := target.ExportNvmetcli(c)
			if err != nil {
				if !force {
					return fmt.Errorf("cannot be exported to nvmetcli's format (--force leaves it out):\n%w", err)
				}
				for _, l := range strings.Split(err.Error(), "\n") {
					fmt.Fprintln(a.stderr, "warning: left out:", l)
				}
			}
			b, err := target.MarshalNvmetcli(nc)
			if err != nil {
				return err
			}
			path := "-"
			if len(args) == 1 {
				path = args[0]
			}
			if path == "-" {
				_, err = a.stdout.Write(b)
				return err
			}
			return writeOut(path, b)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "export what can be, leaving out (with a warning each) what cannot")
	return cmd
}

// readConfigDoc reads FILE: nvmetcli's config.json, or an nvmetd
// configuration (YAML or JSON), and returns the configuration to restore
// as the API's JSON.
func readConfigDoc(path string, force bool, warn io.Writer) (map[string]any, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if isNvmetcli(doc) {
		c, err := target.ImportNvmetcli(b, deviceKind)
		if err != nil {
			var ve *target.ValidationError
			if !errors.As(err, &ve) || !force || c == nil {
				return nil, fmt.Errorf("%s (nvmetcli config.json) cannot be imported (--force leaves out what cannot be mapped):\n%w", path, err)
			}
			for _, l := range strings.Split(err.Error(), "\n") {
				fmt.Fprintln(warn, "warning: left out:", l)
			}
		}
		j, err := json.Marshal(target.EncodeJSON(c))
		if err != nil {
			return nil, err
		}
		var m map[string]any
		err = json.Unmarshal(j, &m)
		// Only what the file configures: transport, tuning and limits stay
		// as the daemon runs them.
		return map[string]any{"ports": m["ports"], "subsystems": m["subsystems"], "hosts": m["hosts"]}, err
	}
	delete(doc, "daemon") // settings of the program, not of the target
	return doc, nil
}

// deviceKind is the backend kind of an nvmetcli device path: the control
// socket is local, so the path is this machine's: a block device is
// block, anything else file (by the path when it does not exist).
func deviceKind(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return target.BackendKindByPath(path)
	}
	if fi.Mode()&os.ModeDevice != 0 {
		return "block"
	}
	return "file"
}

// isNvmetcli tells nvmetcli's config.json from an nvmetd configuration:
// its ports have portid and addr, its subsystems attr.
func isNvmetcli(doc map[string]any) bool {
	if ports, ok := doc["ports"].([]any); ok {
		for _, p := range ports {
			if m, ok := p.(map[string]any); ok {
				if _, ok := m["portid"]; ok {
					return true
				}
				if _, ok := m["addr"]; ok {
					return true
				}
			}
		}
	}
	if subs, ok := doc["subsystems"].([]any); ok {
		for _, s := range subs {
			if m, ok := s.(map[string]any); ok {
				if _, ok := m["attr"]; ok {
					return true
				}
			}
		}
	}
	return false
}

func (a *app) restoreCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "restore FILE",
		Aliases: []string{"import"},
		Short:   "replace the running configuration with FILE: nvmetcli's config.json or an nvmetd configuration (nvmetcli restore)",
		Long: "FILE (- for standard input) is nvmetcli's config.json (nvmetcli save) or an nvmetd configuration file. Its ports, " +
			"subsystems and hosts replace the running ones in one change, applied as a reload would (hosts of what stays keep " +
			"their connections). What nvmetcli's format holds that nvmetd cannot map (other transports, protection information, " +
			"passthru, ...) is named in an error and nothing changes, unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readConfigDoc(args[0], force, a.stderr)
			if err != nil {
				return err
			}
			return a.change("PUT", "/v1/config", doc)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "import what can be mapped, leaving out (with a warning each) what cannot")
	return cmd
}

func (a *app) clearCommand() *cobra.Command {
	var yes, force bool
	cmd := &cobra.Command{
		Use:   "clear",
		Short: "remove every port, subsystem and host (nvmetcli clear): connected hosts are disconnected",
		Long: "Removes the whole running configuration: nothing is served afterwards. It asks for --yes; with hosts connected " +
			"(they lose every namespace and retry until their ctrl_loss_tmo) it also needs --force. The configuration file is " +
			"not touched unless --persist.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := a.fetchConfig()
			if err != nil {
				return err
			}
			if !yes {
				return fmt.Errorf("clear would remove %d subsystem(s) and %d port(s); nothing would be served: give --yes to do it", len(c.Subsystems), len(c.Ports))
			}
			if err := a.refuseConnected("", force, "clear"); err != nil {
				return err
			}
			return a.change("DELETE", "/v1/config", nil)
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "confirm: remove everything")
	cmd.Flags().BoolVar(&force, "force", false, "clear even with hosts connected")
	return cmd
}
