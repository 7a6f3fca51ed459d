// Package initiator is the host side of NVMe over Fabrics on nvmetd's
// NVMe/RDMA transport (a pure-Go iWARP engine over TCP): it connects to a
// controller the way the Linux host does (drivers/nvme/host/fabrics.c,
// core.c and rdma.c), keeps the association alive, recovers from lost
// connections, and gives programs namespaces to read and write.
//
// # Controller
//
// Connect opens an association with a controller, in the order the Linux
// host uses (protocol.md §11.2):
//
//  1. the admin queue: RDMA CM with the NVMe/RDMA private data, then the
//     Fabrics Connect with the Connect data (HOSTID, CNTLID 0xFFFF, SUBNQN,
//     HOSTNQN) and KATO;
//  2. enable (nvme_enable_ctrl): Property Get CAP, Property Set CC with EN
//     clear, Property Get CAP (and CRTO when CAP.CRMS says so), Property Set
//     CC with EN, Property Get CSTS until RDY within CAP.TO, Property Get VS;
//  3. Identify Controller, checked as the Linux host checks it
//     (nvmeof.IdentifyController.CheckFabrics); IOCCSZ gives the in-capsule
//     data size, MDTS the largest transfer, MAXCMD and CAP.MQES the queue size;
//  4. Set Features Number of Queues, then one TCP connection per I/O queue,
//     each opened with its own Fabrics Connect (Connect data in-capsule when
//     SGLS bit 20 and IOCCSZ allow it, as nvme-rdma does);
//  5. keep alive every KATO/2, asynchronous event reporting (Set Features
//     Asynchronous Event Configuration and one Asynchronous Event Request),
//     and the namespace scan (Identify CNS 2, then CNS 3 and CNS 0 per NSID).
//
// A lost connection (a queue that fails, a keep-alive or command that times
// out, a protocol violation) starts error recovery as nvme_rdma_error_recovery
// does: every queue is torn down, commands that did not complete are kept,
// and the association is opened again every ReconnectDelay until it works or
// CtrlLossTimeout has passed (nvmf_should_reconnect). Kept commands are then
// sent again, so an unacknowledged write is retried and an acknowledged one
// is never lost; when the controller is given up, they fail with
// ErrControllerLost.
//
// Close shuts the association down in the order of nvme_rdma_delete_ctrl:
// in-flight I/O drains, volatile write caches are flushed, the I/O queues are
// disconnected, CC.SHN is set and CSTS.SHST awaited (bounded by
// ShutdownTimeout), and the admin queue is disconnected last.
//
// # Namespaces
//
// A Namespace reads and writes with ReadAt/WriteAt (io.ReaderAt and
// io.WriterAt), Flush, WriteZeroes and Discard, which may be called from many
// goroutines at once: requests are split at the controller's maximum transfer
// size and spread over the I/O queues, up to the queue depth; a request waits
// for a free command slot rather than failing. The caller's buffers are used
// in place: the controller RDMA-Writes read data straight into them and
// RDMA-Reads write data straight from them, or small writes travel as
// in-capsule data. Submit is the asynchronous form; nothing is allocated per
// I/O in steady state.
//
// # Multipath
//
// A Subsystem is one NVM subsystem reached through several controllers
// (Subsystem.AddPath: two ports of one target, or two targets serving the
// same subsystem with distinct CNTLID ranges), as the Linux host's native
// multipath (drivers/nvme/host/multipath.c). A namespace with the same NSID
// and identifiers on every path is one Head, with the I/O methods of a
// Namespace. Each path's ANA log page (0x0C) is read when it is added, on
// every ANA Change notice and after each reconnect; the I/O of a Head goes
// to an optimized path, else a non-optimized one, never an inaccessible,
// persistent-loss or changing one, chosen by the IOPolicy (numa: the first
// optimized path while it stays so; round-robin; queue-depth).
//
// A command sent through a Head does not wait for its controller to
// reconnect and is not retried there on a path-related status
// (REQ_NVME_MPATH): a path-related status without DNR (ANA Inaccessible,
// Persistent Loss, Transition, host path errors), a lost connection (and so
// a keep-alive or I/O timeout), or a controller that is not live brings the
// whole request back to the Head once every command of it is over on the
// failed path, and the Head sends it on another usable path
// (nvme_failover_req; an ANA status also makes the path read its ANA log
// again before it is used). While no path is usable the request waits on
// the Head (nvme_requeue_work) until one is, or until no path may come back:
// every controller given up (CtrlLossTimeout), or reconnecting for longer
// than MultipathConfig.FastIOFailTimeout; it then fails with ErrNoPath.
//
// # Discovery
//
// Discover connects to a discovery controller (the well-known discovery NQN,
// KATO 0 as nvme discover), reads the discovery log page exactly as libnvme's
// nvme_discovery_log does (the 1024-byte header, the entries in Get Log Page
// commands of at most 4 KiB at increasing offsets, the header again, and a
// retry when GENCTR changed), and optionally follows referrals.
//
// # Host identity
//
// A Config without HostNQN or HostID takes them from this machine as
// nvme-cli and libnvme do (HostIdentity: /etc/nvme/hostnqn and hostid, else
// the DMI product UUID, the device tree or /etc/machine-id).
//
// # Authentication
//
// With Config.DHCHAPSecret (and DHCHAPCtrlSecret for bidirectional
// authentication) the host runs DH-HMAC-CHAP (nvmeof/auth's Host) on every
// queue whose Connect response asks for it, and on every queue when it
// has a controller secret (auth.go); Reauthenticate and SetSecrets do what
// Linux's sysfs dhchap_secret attributes do.
//
// # Testing
//
// The package's tests run against the real target (package target, through
// its public API) on loopback; target.TestHooks and internal/testing/rawpeer.Proxy
// make it misbehave where a test needs a controller that breaks the rules.
//
// # References
//
// "protocol.md §N" refers to the project's wire reference
// (shared/docs/protocol.md); Linux function names refer to the kernel's
// drivers/nvme/host sources and libnvme.
package initiator
