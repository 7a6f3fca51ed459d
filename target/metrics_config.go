package target

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MetricsConfig is the Prometheus metrics endpoint (the `metrics:` section).
// It is off unless Address or Socket is set; the daemon serves it (the
// target only provides the collector, Target.MetricsCollector).
type MetricsConfig struct {
	// Address is the TCP address to serve on, "IP:port" (":port" for every
	// address), e.g. "127.0.0.1:9469". Exclusive with Socket.
	Address string `mapstructure:"address"`
	// Socket is a unix socket path to serve on instead (mode 0660).
	Socket string `mapstructure:"socket"`
	// Path is the HTTP path of the metrics; default /metrics.
	Path string `mapstructure:"path"`
	// TLSCert and TLSKey are PEM files: with both set, the endpoint speaks
	// HTTPS.
	TLSCert string `mapstructure:"tls_cert"`
	TLSKey  string `mapstructure:"tls_key"`
	// BasicAuthUser and BasicAuthPasswordFile require HTTP basic
	// authentication; the file holds the password (its first line).
	BasicAuthUser         string `mapstructure:"basic_auth_user"`
	BasicAuthPasswordFile string `mapstructure:"basic_auth_password_file"`
	// MaxControllers caps the controllers that get series of their own
	// (with their queues); the rest count in their subsystem's series
	// only. Default 256.
	MaxControllers int `mapstructure:"max_controllers"`
}

// DefaultMetricsPath is the default HTTP path of the metrics.
const DefaultMetricsPath = "/metrics"

// Enabled reports whether the endpoint is configured.
func (m *MetricsConfig) Enabled() bool { return m.Address != "" || m.Socket != "" }

func (m *MetricsConfig) applyDefaults() {
	if m.Path == "" {
		m.Path = DefaultMetricsPath
	}
	if m.MaxControllers == 0 {
		m.MaxControllers = DefaultMetricsMaxControllers
	}
}

// validate checks the section without touching files or the network.
func (m *MetricsConfig) validate(v *validator, mp string) {
	if m.Address != "" && m.Socket != "" {
		v.add(mp+".socket", "set together with address (serve on one: a TCP address or a unix socket)")
	}
	if m.Address != "" {
		host, port, err := net.SplitHostPort(m.Address)
		switch {
		case err != nil:
			v.add(mp+".address", "%q is not IP:port (%v)", m.Address, strings.TrimPrefix(err.Error(), "address "+m.Address+": "))
		default:
			if host != "" {
				if _, err := netip.ParseAddr(host); err != nil {
					v.add(mp+".address", "%q: %q is not an IP address (host names are not resolved)", m.Address, host)
				}
			}
			if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
				v.add(mp+".address", "%q: port %q is out of range (1..65535)", m.Address, port)
			}
		}
	}
	if m.Socket != "" && !filepath.IsAbs(m.Socket) {
		v.add(mp+".socket", "%q is not an absolute path", m.Socket)
	}
	if !strings.HasPrefix(m.Path, "/") {
		v.add(mp+".path", "%q does not start with /", m.Path)
	}
	if (m.TLSCert == "") != (m.TLSKey == "") {
		field := mp + ".tls_key"
		if m.TLSCert == "" {
			field = mp + ".tls_cert"
		}
		v.add(field, "missing (tls_cert and tls_key go together)")
	}
	if (m.BasicAuthUser == "") != (m.BasicAuthPasswordFile == "") {
		field := mp + ".basic_auth_password_file"
		if m.BasicAuthUser == "" {
			field = mp + ".basic_auth_user"
		}
		v.add(field, "missing (basic_auth_user and basic_auth_password_file go together)")
	}
	if strings.Contains(m.BasicAuthUser, ":") {
		v.add(mp+".basic_auth_user", "%q contains a colon, which basic authentication cannot carry", m.BasicAuthUser)
	}
	if m.MaxControllers < 1 || m.MaxControllers > 1<<16 {
		v.add(mp+".max_controllers", "%d is out of range (1..65536)", m.MaxControllers)
	}
	if !m.Enabled() && (m.TLSCert != "" || m.BasicAuthUser != "") {
		v.add(mp+".address", "missing: TLS or basic authentication is set but the endpoint is off (set address or socket)")
	}
}

// check opens what the section names: the TLS key pair and the password
// file.
func (m *MetricsConfig) check(v *validator, mp string) {
	if m.TLSCert != "" && m.TLSKey != "" {
		if _, err := tls.LoadX509KeyPair(m.TLSCert, m.TLSKey); err != nil {
			v.addErr(mp+".tls_cert", fmt.Sprintf("cannot load the key pair: %v", err), err)
		}
	}
	if m.BasicAuthPasswordFile != "" {
		if _, err := ReadMetricsPassword(m.BasicAuthPasswordFile); err != nil {
			v.addErr(mp+".basic_auth_password_file", err.Error(), err)
		}
	}
}

// ReadMetricsPassword reads the basic authentication password: the first
// line of the file, which must not be empty.
func ReadMetricsPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("%s: the first line (the password) is empty", path)
	}
	return line, nil
}
