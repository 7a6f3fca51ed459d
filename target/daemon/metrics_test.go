package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nvmetd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert = writeFile(t, dir, "metrics.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	key = writeFile(t, dir, "metrics.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}

// TestDaemonMetrics runs the daemon with the metrics endpoint over HTTPS
// with basic authentication, scrapes it while a host does I/O, then moves
// it to a unix socket with SIGHUP.
func TestDaemonMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	dir := isolate(t)
	port, mport := testnode.FreePort(t), testnode.FreePort(t)
	notifySock, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notifySock)
	cert, key, pool := selfSigned(t, dir)
	pwFile := writeFile(t, dir, "metrics.pw", "s3cret\n")
	if err := os.Chmod(pwFile, 0o600); err != nil {
		t.Fatal(err)
	}
	msock := filepath.Join(dir, "metrics.sock")
	const (
		subnqn  = "nqn.2014-08.org.example:metrics"
		hostnqn = "nqn.2014-08.org.nvmexpress:uuid:7c9e6679-7425-40de-944b-e07fc1f90a01"
	)
	config := func(metrics string) string {
		return fmt.Sprintf(`daemon: {control_socket: %s, shutdown_timeout: 10s}
ports:
  - {id: 1, address: 127.0.0.1, service_id: %d, subsystems: [%s]}
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: {kind: memory, size: 4MiB}}
metrics: %s
`, filepath.Join(dir, "ctl.sock"), port, subnqn, subnqn, metrics)
	}
	cfgFile := writeFile(t, dir, "nvmetd.yaml", config(fmt.Sprintf("{address: '127.0.0.1:%d', tls_cert: %s, tls_key: %s, basic_auth_user: prom, basic_auth_password_file: %s}", mport, cert, key, pwFile)))
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--config", cfgFile, "--log-format", "json"}, io.Discard, &stderr) }()
	wait := func(prefix string) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, prefix) {
					return
				}
			case c := <-code:
				t.Fatalf("nvmetd exited %d; log:\n%s", c, stderr.String())
			case <-timeout:
				t.Fatalf("no %q; log:\n%s", prefix, stderr.String())
			}
		}
	}
	wait("READY=1")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := initiator.Connect(ctx, initiator.Config{Address: fmt.Sprintf("127.0.0.1:%d", port), SubNQN: subnqn, HostNQN: hostnqn, NrIOQueues: 1, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for i := range 10 {
		if _, err := c.Namespace(1).WriteAtContext(ctx, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", mport)
	get := func(user, pw string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("", ""); st != http.StatusUnauthorized {
		t.Errorf("no credentials: HTTP %d, want 401", st)
	}
	if st, _ := get("prom", "wrong"); st != http.StatusUnauthorized {
		t.Errorf("wrong password: HTTP %d, want 401", st)
	}
	st, body := get("prom", "s3cret")
	if st != http.StatusOK {
		t.Fatalf("HTTP %d: %s", st, body)
	}
	for _, want := range []string{
		`nvmetd_subsystem_commands_total{opcode="write",status="success",subsystem="` + subnqn + `"} 10`,
		`nvmetd_build_info{version=`,
		"process_open_fds ",
		"go_goroutines ",
		`nvmetd_qp_tcp_rtt_seconds{cntlid="1",qid="1",subsystem="` + subnqn + `"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
	c.Close(ctx)

	// SIGHUP moves the endpoint to a unix socket, without TLS or auth.
	writeFile(t, dir, "nvmetd.yaml", config("{socket: "+msock+"}"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("RELOADING=1")
	wait("READY=1")
	uc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", msock)
	}}}
	resp, err := uc.Get("http://nvmetd/metrics")
	if err != nil {
		t.Fatalf("unix socket: %v\n%s", err, stderr.String())
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "nvmetd_controllers_ended_total") {
		t.Errorf("unix socket scrape: HTTP %d\n%s", resp.StatusCode, b)
	}
	if _, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", mport), time.Second); err == nil {
		t.Errorf("the TCP endpoint still answers after the reload")
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d; log:\n%s", c, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("no exit after SIGTERM")
	}
	if _, err := os.Stat(msock); !os.IsNotExist(err) {
		t.Errorf("metrics socket left behind: %v", err)
	}
}
