package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// startNvmetdTCP runs nvmetd with the test subsystem on two ports: 1
// NVMe/RDMA at rdmaPort and 2 NVMe/TCP at tcpPort (p.addr: the TCP one).
func startNvmetdTCP(e *env, rdmaPort, tcpPort int, size string) *nvmetdProc {
	t, dir := e.t, e.dir
	t.Helper()
	_, bin := bins(t)
	cfg := fmt.Sprintf(`daemon:
  log_format: console
  control_socket: %s
ports:
  - id: 1
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
  - id: 2
    transport: tcp
    address: 127.0.0.1
    service_id: %d
    subsystems: [%s]
subsystems:
  - nqn: %s
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend:
          kind: file
          path: %s
          size: %s
`, filepath.Join(dir, "nvmetd.sock"), rdmaPort, testNQN, tcpPort, testNQN, testNQN, filepath.Join(dir, "ns1.img"), size)
	p := &nvmetdProc{t: t, bin: bin, cfg: filepath.Join(dir, "nvmetd.yaml"), logf: filepath.Join(dir, "nvmetd.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort)), NQN: testNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)
	return p
}

// TestE2ETCP: nvmeof -t tcp against nvmetd's NVMe/TCP port: discover
// lists both ports with their TRTYPE, connect with header and data
// digests mounts a new filesystem whose files read back after a
// reconnect without digests; bench -t tcp verifies; connect-all -t tcp
// connects the TRTYPE 3 entry over NVMe/TCP.
func TestE2ETCP(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	rp, tp := freePort(t), freePort(t)
	tg := startNvmetdTCP(e, rp, tp, "256MiB")
	host, port := "127.0.0.1", strconv.Itoa(tp)
	mnt := filepath.Join(e.dir, "mnt")

	// As nvmet, a port's discovery log lists that port's entries.
	out := e.must("discover", "-t", "tcp", "-a", host, "-s", port)
	if !strings.Contains(out, "trtype:  tcp") || strings.Contains(out, "trtype:  rdma") || !strings.Contains(out, "subnqn:  "+tg.NQN) {
		t.Fatalf("discover over TCP does not list the TCP port of %s:\n%s", tg.NQN, out)
	}
	out = e.must("connect", "-t", "tcp", "-g", "-G", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect output:\n%s", out)
	}
	l := e.list()
	if len(l) != 1 || l[0].State != "live" || len(l[0].Namespaces) != 1 || l[0].Namespaces[0].Mount != mnt {
		t.Fatalf("list: %+v", l)
	}
	sums := writeTree(t, mnt, 100, 256<<10, 1)
	checkTree(t, mnt, sums)
	e.must("disconnect", "-n", tg.NQN)
	e.must("connect", "-t", "tcp", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt)
	checkTree(t, mnt, sums)
	e.must("disconnect-all")

	out = e.must("bench", "-t", "tcp", "-a", host, "-s", port, "-n", tg.NQN, "--rw", "randrw", "--bs", "16k",
		"--size", "8m", "--offset", "128m", "--verify", "--force", "--runtime", "500ms", "-l", "0")
	if !strings.Contains(out, "IOPS") && !strings.Contains(out, "iops") {
		t.Fatalf("bench output:\n%s", out)
	}

	// connect-all connects the TRTYPE 3 entry over NVMe/TCP.
	out = e.must("connect-all", "-t", "tcp", "-a", host, "-s", port)
	l = e.list()
	if len(l) != 1 || l[0].Transport != "tcp" || l[0].State != "live" {
		t.Fatalf("connect-all:\n%s\n%+v", out, l)
	}
	e.must("disconnect-all")
}
