// Command nvmetd is the storage node daemon: it exports file and block
// backends as NVMe namespaces over NVMe-oF with the RDMA transport, where
// RDMA is nvmetd's own iWARP engine over TCP (compatible with Linux hosts
// using soft-iWARP and nvme-rdma).
//
//	nvmetd [--config FILE] [flags]   run the target
//	nvmetd --check-config [-o json]  validate, check what it opens, print the effective configuration
//	nvmetd status [-o normal|json]   ask the running daemon for its status
//	nvmetd reload                    reload its configuration and wait for the verdict
//
// Without a configuration file it serves one subsystem with a 1 GiB sparse
// file namespace on 127.0.0.1:4420. Configuration comes from a YAML file
// (see configs/nvmetd.yaml), NVMETD_* environment variables and flags, in
// increasing order of precedence; `nvmetd --help` lists them.
//
// Signals: SIGHUP re-reads the configuration and applies it without
// dropping untouched connections (an invalid configuration is logged and
// the running one kept); SIGTERM and SIGINT drain in-flight I/O for up to
// --shutdown-timeout and exit (a second one abandons the drain). Under
// systemd (Type=notify) it reports READY, RELOADING, STOPPING and pings
// the watchdog while the target is healthy.
//
// The program is package target/daemon (daemon.Main); this package is
// its entry point.
package main

import (
	"os"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/target/daemon"
)

func main() {
	os.Exit(daemon.Main(os.Args[1:], os.Stdout, os.Stderr, hostIdentity))
}

// hostIdentity is this machine's host identity as the host tool and
// nvme-cli present it (initiator.DefaultHostPaths), saved with persist
// when neither file exists.
func hostIdentity(persist bool) (nqn, persisted string, err error) {
	var id initiator.Identity
	if persist {
		id, err = initiator.PersistentHostIdentity(initiator.DefaultHostPaths)
	} else {
		id, err = initiator.HostIdentityFrom(initiator.DefaultHostPaths)
	}
	return id.NQN, id.Persisted, err
}
