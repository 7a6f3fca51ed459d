package autoconnect

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The fabrics configuration files a Linux host already has:
//
//   - /etc/nvme/discovery.conf (nvme-cli): one discovery controller per
//     line, as connect-all's options ("-t rdma -a 10.0.0.5 -s 4420" or
//     "--transport=rdma --traddr=..."); '#' starts a comment.
//   - /etc/nvme/config.json (libnvme, config-schema.json): an array of
//     hosts, each with hostnqn, hostid and subsystems; a subsystem has an
//     nqn and ports (transport, traddr, trsvcid and connect options such
//     as nr_io_queues, queue_size, keep_alive_tmo, reconnect_delay,
//     ctrl_loss_tmo; "discovery": true marks a discovery controller).
//
// nvmeof autoconnect connects what both name, as nvme-cli's
// nvmf-autoconnect.service does at boot with "nvme connect-all".
const (
	DefaultDiscoveryConf = "/etc/nvme/discovery.conf"
	DefaultConfigJSON    = "/etc/nvme/config.json"
)

// Entry is one connection the configuration asks for: a
// connect-all to a discovery controller or a connect to a subsystem,
// with the command line it runs.
type Entry struct {
	Source    string   `json:"source"`    // file:line or file:host/subsystem/port
	Discovery bool     `json:"discovery"` // connect-all (true) or connect
	Args      []string `json:"args"`
	// Secrets are the DH-HMAC-CHAP secrets (--dhchap-secret,
	// --dhchap-ctrl-secret; config.json's dhchap_key, dhchap_ctrl_key),
	// kept out of Args: they are passed to the connection and never
	// printed or logged.
	Secrets Secrets `json:"secrets"`
}

// Secrets are an entry's DH-HMAC-CHAP secrets (literal or file:PATH).
type Secrets struct {
	Host, Ctrl string
}

// MarshalJSON shows whether a secret is set, never the secret.
func (s Secrets) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Host bool `json:"dhchap_secret"`
		Ctrl bool `json:"dhchap_ctrl_secret"`
	}{s.Host != "", s.Ctrl != ""})
}

// Args returns the command line options that carry the secrets (for the
// in-process connect; never printed).
func (s Secrets) Args() []string {
	var a []string
	if s.Host != "" {
		a = append(a, "--dhchap-secret="+s.Host)
	}
	if s.Ctrl != "" {
		a = append(a, "--dhchap-ctrl-secret="+s.Ctrl)
	}
	return a
}

// Redacted returns what a dry run prints for the secrets.
func (s Secrets) Redacted() []string {
	var a []string
	if s.Host != "" {
		a = append(a, "--dhchap-secret=<secret>")
	}
	if s.Ctrl != "" {
		a = append(a, "--dhchap-ctrl-secret=<secret>")
	}
	return a
}

// unsupportedConnectOpts are nvme-cli connect options that nvmeof has no
// use for (they are dropped with a note): host
// interface selection, TLS, write and poll queues.
var unsupportedConnectOpts = map[string]bool{
	"host-traddr": true, "w": true, "host-iface": true, "f": true, "nr-write-queues": true, "W": true,
	"nr-poll-queues": true, "P": true,
	"tos": true, "T": true, "duplicate-connect": true, "D": true, "disable-sqflow": true,
	"persistent": true, "p": true, "tls": true, "concat": true, "fast_io_fail_tmo": true,
	"fast-io-fail-tmo": true, "F": true,
	"keyring": true, "tls-key": true, "quiet": true, "hostsymname": true, "nbft": true, "no-nbft": true,
}

// flagsWithValue are the short options above that take a value.
var shortWithValue = map[string]bool{"w": true, "f": true, "W": true, "P": true, "T": true, "F": true}

// parseDiscoveryConf parses nvme-cli's discovery.conf: one line of
// connect-all options per discovery controller. Lines of another
// transport than rdma are skipped with a note; options nvmeof does not
// have are dropped with a note.
func parseDiscoveryConf(name string, r io.Reader) (entries []Entry, notes []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	ln := 0
	for sc.Scan() {
		ln++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		src := fmt.Sprintf("%s:%d", name, ln)
		args, transport, dropped, sec := filterConnectArgs(fields)
		for _, d := range dropped {
			notes = append(notes, fmt.Sprintf("%s: option %s not used by nvmeof; ignored", src, d))
		}
		if transport != "rdma" && transport != "tcp" {
			notes = append(notes, fmt.Sprintf("%s: transport %q skipped (nvmeof connects NVMe/RDMA and NVMe/TCP)", src, transport))
			continue
		}
		if transport != "tcp" {
			// The digests are NVMe/TCP's.
			kept := args[:0]
			for _, a := range args {
				if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "hdr-digest" || name == "data-digest" || a == "-g" || a == "-G" {
					notes = append(notes, fmt.Sprintf("%s: option %s not used by nvmeof on %s; ignored", src, a, transport))
					continue
				}
				kept = append(kept, a)
			}
			args = kept
		}
		entries = append(entries, Entry{Source: src, Discovery: true, Args: args, Secrets: sec})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return entries, notes, nil
}

// filterConnectArgs drops the options nvmeof lacks, takes the
// DH-HMAC-CHAP secrets out of the arguments, and returns the transport the
// line names (default rdma, as nvmeof's -t).
func filterConnectArgs(fields []string) (args []string, transport string, dropped []string, sec Secrets) {
	transport = "rdma"
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		name, value, hasValue := "", "", false
		switch {
		case strings.HasPrefix(f, "--"):
			name = f[2:]
			if j := strings.IndexByte(name, '='); j >= 0 {
				name, value, hasValue = name[:j], name[j+1:], true
			}
		case strings.HasPrefix(f, "-") && len(f) >= 2:
			name = f[1:2]
			if len(f) > 2 {
				value, hasValue = f[2:], true
			}
		default:
			args = append(args, f)
			continue
		}
		takesNext := func() bool {
			return !hasValue && i+1 < len(fields) && !strings.HasPrefix(fields[i+1], "-")
		}
		if p := secretOpt(name); p != nil {
			if !hasValue && i+1 < len(fields) {
				i++
				value = fields[i]
			}
			*p(&sec) = value
			continue
		}
		if name == "t" || name == "transport" {
			if !hasValue && i+1 < len(fields) {
				i++
				value = fields[i]
			}
			transport = value
			args = append(args, "--transport="+value)
			continue
		}
		if unsupportedConnectOpts[name] {
			d := f
			if (len(name) > 1 || shortWithValue[name]) && takesNext() {
				i++
				d += " " + fields[i]
			}
			dropped = append(dropped, d)
			continue
		}
		args = append(args, f)
	}
	return args, transport, dropped, sec
}

// secretOpt returns, for an option carrying a DH-HMAC-CHAP secret, where
// in Secrets it goes; nil for any other option.
func secretOpt(name string) func(*Secrets) *string {
	switch name {
	case "S", "dhchap-secret":
		return func(s *Secrets) *string { return &s.Host }
	case "C", "dhchap-ctrl-secret":
		return func(s *Secrets) *string { return &s.Ctrl }
	}
	return nil
}

// fabricsConfig is libnvme's config.json (config-schema.json).
type fabricsConfig []struct {
	HostNQN string `json:"hostnqn"`
	HostID  string `json:"hostid"`
	// DHCHAPKey is the host's DH-HMAC-CHAP secret for every port
	// without its own (libnvme: nvme_host_set_dhchap_key).
	DHCHAPKey  string `json:"dhchap_key"`
	Subsystems []struct {
		NQN   string       `json:"nqn"`
		Ports []configPort `json:"ports"`
	} `json:"subsystems"`
}

// configPort is one port of a subsystem in config.json.
type configPort struct {
	Transport      string `json:"transport"`
	TrAddr         string `json:"traddr"`
	TrSvcID        string `json:"trsvcid"`
	HostTrAddr     string `json:"host_traddr"`
	HostIface      string `json:"host_iface"`
	NrIOQueues     *int   `json:"nr_io_queues"`
	QueueSize      *int   `json:"queue_size"`
	KeepAliveTmo   *int   `json:"keep_alive_tmo"`
	ReconnectDelay *int   `json:"reconnect_delay"`
	CtrlLossTmo    *int   `json:"ctrl_loss_tmo"`
	Discovery      bool   `json:"discovery"`
	Persistent     bool   `json:"persistent"`
	HdrDigest      bool   `json:"hdr_digest"`
	DataDigest     bool   `json:"data_digest"`
	TLS            bool   `json:"tls"`
	// DHCHAPKey and DHCHAPCtrlKey are the port's DH-HMAC-CHAP host and
	// controller secrets (connect's --dhchap-secret and
	// --dhchap-ctrl-secret).
	DHCHAPKey     string `json:"dhchap_key"`
	DHCHAPCtrlKey string `json:"dhchap_ctrl_key"`
}

// parseConfigJSON parses libnvme's config.json into connections: a
// connect per subsystem port, a connect-all per discovery port (or port
// of the well-known discovery NQN).
func parseConfigJSON(name string, r io.Reader) (entries []Entry, notes []string, err error) {
	dec := json.NewDecoder(io.LimitReader(r, 16<<20))
	var cfg fabricsConfig
	if err := dec.Decode(&cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	for hi, h := range cfg {
		for si, s := range h.Subsystems {
			for pi, p := range s.Ports {
				src := fmt.Sprintf("%s:host[%d].subsystems[%d].ports[%d]", name, hi, si, pi)
				tr := p.Transport
				if tr == "" {
					tr = "rdma"
				}
				if tr != "rdma" && tr != "tcp" {
					notes = append(notes, fmt.Sprintf("%s: transport %q skipped (nvmeof connects NVMe/RDMA and NVMe/TCP)", src, tr))
					continue
				}
				if p.TrAddr == "" {
					notes = append(notes, fmt.Sprintf("%s: no traddr; skipped", src))
					continue
				}
				disc := p.Discovery || s.NQN == nvmeof.DiscoveryNQN
				if !disc && s.NQN == "" {
					notes = append(notes, fmt.Sprintf("%s: subsystem without nqn; skipped", src))
					continue
				}
				args := []string{"--transport=" + tr, "--traddr=" + p.TrAddr}
				if p.TrSvcID != "" {
					args = append(args, "--trsvcid="+p.TrSvcID)
				}
				if !disc {
					args = append(args, "--nqn="+s.NQN)
				}
				if h.HostNQN != "" {
					args = append(args, "--hostnqn="+h.HostNQN)
				}
				if h.HostID != "" {
					args = append(args, "--hostid="+h.HostID)
				}
				for _, o := range []struct {
					flag string
					v    *int
				}{{"nr-io-queues", p.NrIOQueues}, {"queue-size", p.QueueSize}, {"keep-alive-tmo", p.KeepAliveTmo},
					{"reconnect-delay", p.ReconnectDelay}, {"ctrl-loss-tmo", p.CtrlLossTmo}} {
					if o.v != nil && !(disc && (o.flag == "nr-io-queues" || o.flag == "queue-size")) {
						args = append(args, "--"+o.flag+"="+strconv.Itoa(*o.v))
					}
				}
				if tr == "tcp" && p.HdrDigest {
					args = append(args, "--hdr-digest")
				}
				if tr == "tcp" && p.DataDigest {
					args = append(args, "--data-digest")
				}
				for _, u := range []struct {
					set  bool
					name string
				}{{p.HostTrAddr != "", "host_traddr"}, {p.HostIface != "", "host_iface"}, {p.HdrDigest && tr != "tcp", "hdr_digest"},
					{p.DataDigest && tr != "tcp", "data_digest"}, {p.TLS, "tls"}, {p.Persistent, "persistent"}} {
					if u.set {
						notes = append(notes, fmt.Sprintf("%s: %s not used by nvmeof; ignored", src, u.name))
					}
				}
				sec := Secrets{Host: h.DHCHAPKey, Ctrl: p.DHCHAPCtrlKey}
				if p.DHCHAPKey != "" {
					sec.Host = p.DHCHAPKey
				}
				entries = append(entries, Entry{Source: src, Discovery: disc, Args: args, Secrets: sec})
			}
		}
	}
	return entries, notes, nil
}

// Load reads both files; a missing file is no error.
func Load(discoveryConf, configJSON string) ([]Entry, []string, error) {
	var all []Entry
	var notes []string
	for _, f := range []struct {
		path  string
		parse func(string, io.Reader) ([]Entry, []string, error)
	}{{configJSON, parseConfigJSON}, {discoveryConf, parseDiscoveryConf}} {
		if f.path == "" {
			continue
		}
		fh, err := os.Open(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		e, n, err := f.parse(f.path, fh)
		fh.Close()
		if err != nil {
			return nil, nil, err
		}
		all, notes = append(all, e...), append(notes, n...)
	}
	return all, notes, nil
}
