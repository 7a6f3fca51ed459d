package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
)

// body collects the flags set on the command line into a request body
// (keys of the configuration file): only flags given are sent, so a
// modification changes only them.
type body struct {
	fs     *pflag.FlagSet
	fields []func(m map[string]any)
}

func newBody(fs *pflag.FlagSet) *body { return &body{fs: fs} }

// str adds a string flag for key (a dotted key goes into a nested object).
func (b *body) str(flag, key, usage string) {
	v := b.fs.String(flag, "", usage)
	b.fields = append(b.fields, func(m map[string]any) {
		if b.fs.Changed(flag) {
			put(m, key, *v)
		}
	})
}

func (b *body) boolean(flag, key, usage string) {
	v := b.fs.Bool(flag, false, usage)
	b.fields = append(b.fields, func(m map[string]any) {
		if b.fs.Changed(flag) {
			put(m, key, *v)
		}
	})
}

func (b *body) integer(flag, key, usage string) {
	v := b.fs.Int(flag, 0, usage)
	b.fields = append(b.fields, func(m map[string]any) {
		if b.fs.Changed(flag) {
			put(m, key, *v)
		}
	})
}

func (b *body) strings(flag, key, usage string) {
	v := b.fs.StringSlice(flag, nil, usage)
	b.fields = append(b.fields, func(m map[string]any) {
		if b.fs.Changed(flag) {
			put(m, key, *v)
		}
	})
}

// build returns the body of the flags given.
func (b *body) build() map[string]any {
	m := map[string]any{}
	for _, f := range b.fields {
		f(m)
	}
	return m
}

// buildSecrets is build for a body with DH-HMAC-CHAP keys: a key given as
// - is read from in (one line; at most one key may be -), file:PATH
// passes through, a literal secret is refused (see hostFlags).
func (b *body) buildSecrets(in io.Reader) (map[string]any, error) {
	m := b.build()
	stdinUsed := false
	for _, k := range []string{"dhchap_key", "dhchap_ctrl_key"} {
		v, ok := m[k].(string)
		switch {
		case !ok || v == "" || strings.HasPrefix(v, "file:"):
		case v == "-":
			if stdinUsed {
				return nil, fmt.Errorf("--dhchap-key and --dhchap-ctrl-key cannot both be read from standard input")
			}
			stdinUsed = true
			line, err := bufio.NewReader(in).ReadString('\n')
			if line = strings.TrimSpace(line); line == "" {
				return nil, fmt.Errorf("%s: no key on standard input (%v)", k, err)
			}
			m[k] = line
		default:
			return nil, fmt.Errorf("%s: a literal secret on the command line is readable by every local user (ps, /proc/PID/cmdline): "+
				"give file:PATH (a file only nvmetd's user may read) or - and the key on standard input", k)
		}
	}
	return m, nil
}

// put sets a dotted key in m ("backend.size").
func put(m map[string]any, key string, v any) {
	for i := 0; i < len(key); i++ {
		if key[i] == '.' {
			sub, _ := m[key[:i]].(map[string]any)
			if sub == nil {
				sub = map[string]any{}
				m[key[:i]] = sub
			}
			put(sub, key[i+1:], v)
			return
		}
	}
	m[key] = v
}

func (a *app) subsystemCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "subsystem", Aliases: []string{"subsystems", "subsys"}, Short: "list, add, modify and remove subsystems"}
	list := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "list subsystems", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var subs []target.SubsystemConfig
			var raw []map[string]any
			return a.get("/v1/subsystems", &raw, func() {
				_ = decodeList(raw, &subs)
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NQN\tSERIAL\tMODEL\tHOSTS\tNAMESPACES")
				for _, s := range subs {
					hosts := "any"
					if !s.AllowAnyHost {
						hosts = strconv.Itoa(len(s.AllowedHosts))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", s.NQN, s.Serial, s.Model, hosts, len(s.Namespaces))
				}
				tw.Flush()
			})
		}}
	add := &cobra.Command{Use: "add NQN", Aliases: []string{"create"}, Short: "add a subsystem (SPDK nvmf_create_subsystem)", Args: cobra.ExactArgs(1)}
	ab := subsystemFlags(add.Flags())
	add.RunE = func(cmd *cobra.Command, args []string) error {
		m := ab.build()
		m["nqn"] = args[0]
		return a.change("POST", "/v1/subsystems", m)
	}
	set := &cobra.Command{Use: "set NQN", Aliases: []string{"modify"}, Short: "modify a subsystem: only the flags given change", Args: cobra.ExactArgs(1)}
	sb := subsystemFlags(set.Flags())
	set.RunE = func(cmd *cobra.Command, args []string) error {
		return a.change("PATCH", "/v1/subsystems/"+esc(args[0]), sb.build())
	}
	var force bool
	remove := &cobra.Command{Use: "remove NQN", Aliases: []string{"rm", "delete"}, Short: "remove a subsystem with its namespaces (SPDK nvmf_delete_subsystem)",
		Long: "Removes the subsystem and its namespaces. Hosts connected to it lose it at once and retry until their ctrl_loss_tmo " +
			"(Linux: 600 s by default) before they give up: with hosts connected the removal is refused, naming them, unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.refuseConnected(args[0], force, "remove subsystem "+args[0]); err != nil {
				return err
			}
			return a.change("DELETE", "/v1/subsystems/"+esc(args[0]), nil)
		}}
	remove.Flags().BoolVar(&force, "force", false, "remove it even with hosts connected")
	cmd.AddCommand(list, add, set, remove)
	return cmd
}

func subsystemFlags(fs *pflag.FlagSet) *body {
	b := newBody(fs)
	b.str("serial", "serial", "serial number (default derived from the NQN)")
	b.str("model", "model", "model number")
	b.str("firmware", "firmware_revision", "firmware revision")
	b.boolean("allow-any-host", "allow_any_host", "let every host connect")
	b.boolean("auth-required", "auth_required", "every host must authenticate (DH-HMAC-CHAP) before it may do anything")
	b.strings("allow-host", "allowed_hosts", "host NQNs allowed to connect (repeat or comma-separate)")
	b.integer("max-namespaces", "max_namespaces", "Identify Controller NN")
	return b
}

// decodeList decodes a list of configuration objects from the API's JSON.
func decodeList[T any](raw []map[string]any, out *[]T) error {
	for _, m := range raw {
		var v T
		if err := target.DecodeMap(m, &v); err != nil {
			return err
		}
		*out = append(*out, v)
	}
	return nil
}

func (a *app) namespaceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "namespace", Aliases: []string{"namespaces", "ns"}, Short: "list, add, modify, resize and remove namespaces"}
	list := &cobra.Command{Use: "list NQN", Aliases: []string{"ls"}, Short: "list a subsystem's namespaces", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []map[string]any
			return a.get("/v1/subsystems/"+esc(args[0])+"/namespaces", &raw, func() {
				var list []target.NamespaceConfig
				_ = decodeList(raw, &list)
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NSID\tENABLED\tKIND\tPATH\tSIZE\tANA GROUP")
				for _, n := range list {
					fmt.Fprintf(tw, "%d\t%v\t%s\t%s\t%s\t%d\n", n.NSID, n.IsEnabled(), n.Backend.Kind, n.Backend.Path, n.Backend.Size, n.ANAGroup)
				}
				tw.Flush()
			})
		}}
	add := &cobra.Command{Use: "add NQN", Short: "add a namespace (SPDK nvmf_subsystem_add_ns); hosts see it through a Namespace Attribute Changed notice",
		Long: "The backend is --path (a file, or a block device under /dev: --kind defaults to block there, file elsewhere), " +
			"or --kind memory|null with --size. --nsid 0 (default) takes the smallest free NSID.", Args: cobra.ExactArgs(1)}
	ab := namespaceFlags(add.Flags())
	nsid := add.Flags().Uint32("nsid", 0, "NSID (0: the smallest free one)")
	add.RunE = func(cmd *cobra.Command, args []string) error {
		m := ab.build()
		m["nsid"] = *nsid
		be, _ := m["backend"].(map[string]any)
		if be == nil {
			be = map[string]any{}
			m["backend"] = be
		}
		if _, ok := be["kind"]; !ok {
			if p, _ := be["path"].(string); p != "" {
				be["kind"] = target.BackendKindByPath(p)
			}
		}
		return a.change("POST", "/v1/subsystems/"+esc(args[0])+"/namespaces", m)
	}
	set := &cobra.Command{Use: "set NQN NSID", Aliases: []string{"modify"}, Short: "modify a namespace: only the flags given change", Args: cobra.ExactArgs(2)}
	sb := namespaceFlags(set.Flags())
	set.RunE = func(cmd *cobra.Command, args []string) error {
		return a.change("PATCH", "/v1/subsystems/"+esc(args[0])+"/namespaces/"+esc(args[1]), sb.build())
	}
	resize := &cobra.Command{Use: "resize NQN NSID SIZE", Short: "set a namespace's size (e.g. 20GiB; SPDK bdev_*_resize); hosts get a Namespace Attribute Changed notice", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("POST", "/v1/subsystems/"+esc(args[0])+"/namespaces/"+esc(args[1])+"/resize", map[string]any{"size": args[2]})
		}}
	enable := func(use string, on bool) *cobra.Command {
		return &cobra.Command{Use: use + " NQN NSID", Short: use + " a namespace", Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.change("PATCH", "/v1/subsystems/"+esc(args[0])+"/namespaces/"+esc(args[1]), map[string]any{"enabled": on})
			}}
	}
	remove := &cobra.Command{Use: "remove NQN NSID", Aliases: []string{"rm", "delete"}, Short: "remove a namespace (SPDK nvmf_subsystem_remove_ns)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("DELETE", "/v1/subsystems/"+esc(args[0])+"/namespaces/"+esc(args[1]), nil)
		}}
	cmd.AddCommand(list, add, set, resize, enable("enable", true), enable("disable", false), remove)
	return cmd
}

func namespaceFlags(fs *pflag.FlagSet) *body {
	b := newBody(fs)
	b.str("path", "backend.path", "file or block device")
	b.str("kind", "backend.kind", "file, block, memory, null or rbd")
	b.str("size", "backend.size", "size (e.g. 1GiB): required for memory and null; a missing file is created this size")
	b.integer("block-size", "backend.block_size", "logical block size: 512 or 4096")
	b.boolean("read-only", "backend.read_only", "write-protected")
	b.boolean("direct", "backend.direct", "bypass the page cache (file)")
	b.boolean("create-dirs", "backend.create_dirs", "create missing directories of a new file")
	b.str("pool", "backend.pool", "Ceph pool (rbd)")
	b.str("image", "backend.image", "Ceph RBD image (rbd)")
	b.str("rados-namespace", "backend.rados_namespace", "RADOS namespace of the image (rbd)")
	b.str("ceph-conf", "backend.ceph_conf", "ceph.conf the gateway reads (rbd; default /etc/ceph/ceph.conf)")
	b.str("client-id", "backend.client_id", "cephx user without \"client.\" (rbd; default admin)")
	b.str("keyring", "backend.keyring", "keyring of the cephx user (rbd; default: as ceph.conf says)")
	b.str("nguid", "nguid", "NGUID (default derived)")
	b.str("uuid", "uuid", "namespace UUID (default derived)")
	b.integer("ana-group", "ana_group", "ANA group ID")
	b.boolean("enabled", "enabled", "visible to hosts (default true)")
	return b
}

func (a *app) portCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "port", Aliases: []string{"ports", "listener"}, Short: "list, add, modify and remove ports; link subsystems to them"}
	list := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "list ports", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []map[string]any
			return a.get("/v1/ports", &raw, func() {
				var list []target.PortConfig
				_ = decodeList(raw, &list)
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tADDRESS\tSUBSYSTEMS\tANA GROUPS")
				for _, p := range list {
					var ana []string
					for _, g := range p.ANAGroups {
						ana = append(ana, fmt.Sprintf("%d=%s", g.ID, g.State))
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.ID, p.ListenAddress(), listOrDash(p.Subsystems), listOrDash(ana))
				}
				tw.Flush()
			})
		}}
	add := &cobra.Command{Use: "add", Aliases: []string{"create"}, Short: "add a port (SPDK nvmf_subsystem_add_listener)", Args: cobra.NoArgs}
	ab := portFlags(add.Flags())
	id := add.Flags().Uint16("id", 0, "port ID (0: the smallest free one)")
	add.RunE = func(cmd *cobra.Command, args []string) error {
		m := ab.build()
		m["id"] = *id
		return a.change("POST", "/v1/ports", m)
	}
	set := &cobra.Command{Use: "set ID", Aliases: []string{"modify"}, Short: "modify a port: only the flags given change", Args: cobra.ExactArgs(1)}
	sb := portFlags(set.Flags())
	set.RunE = func(cmd *cobra.Command, args []string) error {
		return a.change("PATCH", "/v1/ports/"+esc(args[0]), sb.build())
	}
	remove := &cobra.Command{Use: "remove ID", Aliases: []string{"rm", "delete"}, Short: "remove a port (its connections close)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("DELETE", "/v1/ports/"+esc(args[0]), nil)
		}}
	link := &cobra.Command{Use: "link ID NQN", Short: "serve a subsystem on the port", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("PUT", "/v1/ports/"+esc(args[0])+"/subsystems/"+esc(args[1]), nil)
		}}
	unlink := &cobra.Command{Use: "unlink ID NQN", Short: "stop serving a subsystem on the port", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("DELETE", "/v1/ports/"+esc(args[0])+"/subsystems/"+esc(args[1]), nil)
		}}
	cmd.AddCommand(list, add, set, remove, link, unlink)
	return cmd
}

func portFlags(fs *pflag.FlagSet) *body {
	b := newBody(fs)
	b.str("address", "address", "IPv4 or IPv6 address to listen on (traddr)")
	b.integer("service-id", "service_id", "TCP port (trsvcid, default 4420)")
	b.str("transport", "transport", "rdma (default) or tcp (trtype)")
	b.integer("inline-data-size", "inline_data_size", "in-capsule data size")
	b.integer("max-queue-size", "max_queue_size", "largest I/O queue a host may create")
	b.strings("subsystem", "subsystems", "subsystem NQNs served (repeat or comma-separate)")
	b.boolean("auth-required", "auth_required", "every host connecting through this port must authenticate (DH-HMAC-CHAP)")
	return b
}

func (a *app) hostCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "host", Aliases: []string{"hosts"}, Short: "known hosts, and the hosts a subsystem allows"}
	list := &cobra.Command{Use: "list [SUBNQN]", Aliases: []string{"ls"}, Short: "list known hosts, or the hosts a subsystem allows", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				var raw map[string]any
				return a.get("/v1/subsystems/"+esc(args[0]), &raw, func() {
					var sc target.SubsystemConfig
					_ = target.DecodeMap(raw, &sc)
					if sc.AllowAnyHost {
						fmt.Fprintln(a.stdout, "(any host)")
					}
					for _, h := range sc.AllowedHosts {
						fmt.Fprintln(a.stdout, h)
					}
				})
			}
			var raw []map[string]any
			return a.get("/v1/hosts", &raw, func() {
				var list []target.HostConfig
				_ = decodeList(raw, &list)
				for _, h := range list {
					key := "no key"
					if h.DHCHAPKey != "" {
						key = "key"
					}
					fmt.Fprintf(a.stdout, "%s\t%s\t%s\n", h.NQN, key, h.Description)
				}
			})
		}}
	add := &cobra.Command{Use: "add HOSTNQN", Short: "add a known host, with its DH-HMAC-CHAP keys", Args: cobra.ExactArgs(1)}
	hb := hostFlags(add.Flags())
	add.RunE = func(cmd *cobra.Command, args []string) error {
		m, err := hb.buildSecrets(a.stdin())
		if err != nil {
			return err
		}
		m["nqn"] = args[0]
		return a.change("POST", "/v1/hosts", m)
	}
	set := &cobra.Command{Use: "set HOSTNQN", Short: "modify a known host: only the flags given change (a key rotation applies from its next authentication)", Args: cobra.ExactArgs(1)}
	sb := hostFlags(set.Flags())
	set.RunE = func(cmd *cobra.Command, args []string) error {
		m, err := sb.buildSecrets(a.stdin())
		if err != nil {
			return err
		}
		return a.change("PATCH", "/v1/hosts/"+esc(args[0]), m)
	}
	remove := &cobra.Command{Use: "remove HOSTNQN", Aliases: []string{"rm", "delete"}, Short: "remove a known host", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("DELETE", "/v1/hosts/"+esc(args[0]), nil)
		}}
	allow := &cobra.Command{Use: "allow SUBNQN HOSTNQN", Short: "allow a host to connect to a subsystem (SPDK nvmf_subsystem_add_host)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("PUT", "/v1/subsystems/"+esc(args[0])+"/hosts/"+esc(args[1]), nil)
		}}
	disallow := &cobra.Command{Use: "disallow SUBNQN HOSTNQN", Short: "disallow a host (its controllers are torn down; SPDK nvmf_subsystem_remove_host)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("DELETE", "/v1/subsystems/"+esc(args[0])+"/hosts/"+esc(args[1]), nil)
		}}
	cmd.AddCommand(list, add, set, remove, allow, disallow)
	return cmd
}

// hostFlags are a known host's settings. The keys are secrets: on the
// command line they would be readable by every local user (ps,
// /proc/PID/cmdline), so a literal is refused; give file:PATH (a file only
// nvmetd's user may read) or - (read the key from standard input).
func hostFlags(fs *pflag.FlagSet) *body {
	b := newBody(fs)
	b.str("description", "description", "free text shown in status and logs")
	b.str("dhchap-key", "dhchap_key", "the host's DH-HMAC-CHAP secret: file:PATH, or - to read it from standard input")
	b.str("dhchap-ctrl-key", "dhchap_ctrl_key", "the controller's secret for this host (bidirectional): file:PATH, or -")
	b.str("dhchap-hash", "dhchap_hash", "hash: hmac(sha256), hmac(sha384) or hmac(sha512)")
	b.str("dhchap-dhgroup", "dhchap_dhgroup", "DH group: null, ffdhe2048 ... ffdhe8192")
	return b
}

// listOrDash joins a list with commas, or "-" when it is empty.
func listOrDash(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

func (a *app) anaCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ana", Short: "ANA group states per port"}
	set := &cobra.Command{Use: "set PORT GROUP STATE", Short: "set an ANA group's state on a port: optimized, non-optimized, inaccessible, persistent-loss, change (SPDK nvmf_subsystem_listener_set_ana_state)",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change("PUT", "/v1/ports/"+esc(args[0])+"/ana_groups/"+esc(args[1]), map[string]any{"state": args[2]})
		}}
	cmd.AddCommand(set)
	return cmd
}

func (a *app) logLevelCommand() *cobra.Command {
	return &cobra.Command{Use: "log-level [LEVEL]", Short: "show or set the log level: debug, info, warn, error (SPDK log_set_level)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				var v struct {
					Level string `json:"level"`
				}
				return a.get("/v1/log_level", &v, func() { fmt.Fprintln(a.stdout, v.Level) })
			}
			return a.change("PUT", "/v1/log_level", map[string]any{"level": args[0]})
		}}
}

func (a *app) controllersCommand() *cobra.Command {
	return &cobra.Command{Use: "controllers", Aliases: []string{"ctrls"}, Short: "live controllers with their I/O counters (SPDK nvmf_subsystem_get_controllers)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []target.ControllerStatus
			return a.get("/v1/controllers", &list, func() {
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "CNTLID\tSUBSYSTEM\tHOST\tREMOTE\tPORT\tIO QUEUES\tREADS\tWRITES\tERRORS\tCONNECTED")
				for _, c := range list {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d (%dB)\t%d (%dB)\t%d\t%s\n", c.CNTLID, c.Subsystem, c.HostNQN, c.RemoteAddress, c.PortID,
						c.IOQueues, c.IO.ReadCommands, c.IO.ReadBytes, c.IO.WriteCommands, c.IO.WriteBytes, c.IO.Errors, time.Since(c.ConnectedAt).Round(time.Second))
				}
				tw.Flush()
			})
		}}
}

func (a *app) queuesCommand() *cobra.Command {
	return &cobra.Command{Use: "queues", Aliases: []string{"stats"}, Short: "queues of the live controllers with their statistics (SPDK nvmf_get_stats)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []target.QueueStatus
			return a.get("/v1/queues", &list, func() {
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "CNTLID\tQID\tSIZE\tHOST\tREMOTE\tIN FLIGHT\tREADS\tWRITES\tOTHER\tERRORS")
				for _, q := range list {
					fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%d\t%d (%dB)\t%d (%dB)\t%d\t%d\n", q.CNTLID, q.QID, q.Size, q.HostNQN, q.RemoteAddress, q.InFlight,
						q.IO.ReadCommands, q.IO.ReadBytes, q.IO.WriteCommands, q.IO.WriteBytes, q.IO.OtherCommands, q.IO.Errors)
				}
				tw.Flush()
			})
		}}
}

// rpcMethods maps SPDK rpc.py's method names to nvmetctl's commands
// (rpc.py's positional arguments where they fit): `nvmetctl
// nvmf_get_stats` is `nvmetctl queues`.
var rpcMethods = map[string][]string{
	"nvmf_get_subsystems":                   {"subsystem", "list"},
	"nvmf_create_subsystem":                 {"subsystem", "add"},
	"nvmf_delete_subsystem":                 {"subsystem", "remove"},
	"nvmf_subsystem_add_ns":                 {"namespace", "add"},
	"nvmf_subsystem_remove_ns":              {"namespace", "remove"},
	"nvmf_subsystem_add_host":               {"host", "allow"},
	"nvmf_subsystem_remove_host":            {"host", "disallow"},
	"nvmf_subsystem_add_listener":           {"port", "add"},
	"nvmf_subsystem_listener_set_ana_state": {"ana", "set"},
	"nvmf_subsystem_get_controllers":        {"controllers"},
	"nvmf_get_stats":                        {"queues"},
	"log_set_level":                         {"log-level"},
	"save_config":                           {"save"},
	"load_config":                           {"restore"},
}

// rpcArgs rewrites an rpc.py method name at the start of args.
func rpcArgs(args []string) []string {
	valued := map[string]bool{"--socket": true, "--config": true, "-o": true, "--output": true, "--timeout": true}
	for i := 0; i < len(args); i++ {
		x := args[i]
		if len(x) > 0 && x[0] == '-' {
			if valued[x] {
				i++ // its value
			}
			continue // a global flag before the command
		}
		if cmd, ok := rpcMethods[x]; ok {
			out := append(append(append([]string{}, args[:i]...), cmd...), args[i+1:]...)
			return out
		}
		break
	}
	return args
}

// connectedHosts lists the live I/O controllers of subsystem nqn (every
// subsystem's for ""), one "HOSTNQN (REMOTE, cntlid N)" each.
func (a *app) connectedHosts(nqn string) ([]string, error) {
	var list []target.ControllerStatus
	if err := a.call("GET", "/v1/controllers", nil, nil, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list {
		if !c.Discovery && (nqn == "" || c.Subsystem == nqn) {
			out = append(out, fmt.Sprintf("%s (%s, %s, cntlid %d)", c.HostNQN, c.Subsystem, c.RemoteAddress, c.CNTLID))
		}
	}
	return out, nil
}

// refuseConnected refuses what (a removal) while hosts are connected to
// nqn ("" for any subsystem), unless force: they would lose their
// namespaces and sit in reconnect for their ctrl_loss_tmo (issue 23.9).
func (a *app) refuseConnected(nqn string, force bool, what string) error {
	hosts, err := a.connectedHosts(nqn)
	if err != nil {
		return err
	}
	if len(hosts) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d host controller(s) connected, which would lose their namespaces and retry until their ctrl_loss_tmo:\n  %s",
		len(hosts), strings.Join(hosts, "\n  "))
	if !force {
		return fmt.Errorf("%s refused: %s\ndisconnect them first (nvme disconnect / nvmeof disconnect), or give --force", what, msg)
	}
	fmt.Fprintf(a.stderr, "warning: %s: %s\n", what, msg)
	return nil
}

// groupCommand shows the gateway group's state: its gateways and the
// version of the group's configuration each runs (held in RADOS,
// gateway.group_config: rados), the holder of each ANA group, and the
// problems an operator must act on.
func (a *app) groupCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "group", Short: "the gateway group's state: gateways, configuration versions, ANA group holders, drains, problems", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var st ctlclient.GroupStatus
			return a.get("/v1/group", &st, func() {
				if st.Version != 0 {
					fmt.Fprintf(a.stdout, "group %s: version %d (%s), as %s sees it\n", st.Group, st.Version, st.Object, st.Gateway)
				} else {
					fmt.Fprintf(a.stdout, "group %s: configuration in each gateway's file (%s), as %s sees it\n", st.Group, st.Object, st.Gateway)
				}
				holds := map[string][]string{}
				for _, g := range st.ANAGroups {
					if g.Holder != "" {
						holds[g.Holder] = append(holds[g.Holder], fmt.Sprint(g.ID))
					}
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "GATEWAY\tRUNS\tSTATE\tHOLDS")
				for _, m := range st.Members {
					runs, note := fmt.Sprint(m.Running), "current"
					switch {
					case st.Version == 0:
						runs, note = "-", "file"
					case m.Running == 0:
						note = "no version recorded"
					case m.Running < st.Version:
						note = "behind"
					}
					if m.Alive != nil && !*m.Alive {
						// It runs nothing now; it starts on the stored version.
						note = "not alive"
					}
					if m.Drained {
						note += ", drained"
						if len(holds[m.Name]) > 0 {
							note += " (draining)"
						}
					}
					h := strings.Join(holds[m.Name], ",")
					if h == "" {
						h = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, runs, note, h)
				}
				tw.Flush()
				if len(st.ANAGroups) > 0 {
					tw = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "ANA GROUP\tPREFERRED\tHOLDER")
					for _, g := range st.ANAGroups {
						h := g.Holder
						if h == "" {
							h = "none"
						}
						if g.Pinned {
							h += " (pinned)"
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\n", g.ID, g.Preferred, h)
					}
					tw.Flush()
				}
				if len(st.Draining) > 0 {
					fmt.Fprintln(a.stdout, "draining:")
					for _, p := range st.Draining {
						fmt.Fprintf(a.stdout, "  %s\n", p)
					}
				}
				if len(st.Problems) == 0 {
					fmt.Fprintln(a.stdout, "health: ok")
					return
				}
				fmt.Fprintln(a.stdout, "health: attention")
				for _, p := range st.Problems {
					fmt.Fprintf(a.stdout, "  %s\n", p)
				}
			})
		}}
	cmd.AddCommand(a.groupMoveCommand(), a.groupPinCommand(true), a.groupPinCommand(false))
	return cmd
}
