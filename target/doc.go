// Package target is the NVMe over Fabrics target of nvmetd: it listens on
// the configured ports with the NVMe/RDMA binding (nvmeof/rdma, over the
// iWARP engine), serves the discovery subsystem and the configured NVM
// subsystems, runs the controllers hosts create, and executes their
// commands against the namespaces' storage backends.
//
// The daemon uses New, Start, Reload, Shutdown, Status, Healthy and
// HealthReport (api.go) with the configuration model of config_*.go.
//
// # Behaviour
//
// The target behaves as Linux nvmet does toward a Linux host (the reference
// is drivers/nvme/target: fabrics-cmd.c, core.c, admin-cmd.c, discovery.c,
// io-cmd-*.c), so a stock host discovers, connects, and runs file systems
// and fio on it unchanged; where nvmet and the specification differ, the
// comments say which is followed. In short:
//
//   - Connect: the checks, statuses and IATTR/IPO results of nvmet; dynamic
//     controllers only, CNTLIDs unique per subsystem within its configured
//     range, handed out round robin; a Connect on a connected queue is an
//     unknown capsule (Invalid Opcode), a second Connect of a QID is a
//     Command Sequence Error.
//   - Controller: CAP (MQES from the port's queue size, TO 7.5 s, NVM
//     command set only: bit 43 is clear, so hosts keep CC.CSS at NVM), VS and
//     Identify VER 1.3, the CC/CSTS machine of nvmet_update_cc; a shutdown
//     notification flushes the subsystem's namespaces before SHST reads
//     complete. Everything but Fabrics commands needs CSTS.RDY.
//   - Keep alive: KATO rounded up to seconds and clamped to the configured
//     range; traffic based (CTRATT TBKAS): every command restarts the timer;
//     KATO 0 means the configured default (120 s) on every controller (nvmet
//     lets it disable keep alive on I/O controllers, which would let any
//     host leave a controller behind forever); on expiry the controller and
//     all its queues go.
//   - Asynchronous events: Namespace Attribute Changed (with the Changed
//     Namespace List) on I/O controllers, Discovery Log Changed on discovery
//     controllers; up to four AERs held, never timed out; an event kind stays
//     masked until the host reads its log page (without RAE: unmasked
//     before the page is built, so that a change while the host reads
//     raises a new event); ANA Change notices on I/O controllers.
//   - ANA (asymmetric namespace access, ana.go): every namespace is in an
//     ANA group; each port gives each group a state (PortConfig.ANAGroups,
//     optimized unless listed), reported in the ANA log page (with or
//     without NSIDs) as seen through the port the host is connected to, and
//     enforced on I/O with the path-related statuses (ANA Inaccessible,
//     Persistent Loss, Transition); a reload that changes a port's states
//     notifies that port's controllers (ANA Change).
//   - Discovery log: per port, for the asking host: the current discovery
//     subsystem, each subsystem of the port the host may connect to, the
//     port's referrals. A wildcard listen address is reported as the address
//     the host connected to. GENCTR moves on every change a log can show.
//   - I/O: Read, Write (FUA), Flush (also of every namespace), Write Zeroes
//     (DEAC), Dataset Management deallocate. Checks (namespace, write
//     protection, transfer length against the SGL, LBA range) run on the
//     queue's engine goroutine; the backend call runs on a bounded worker
//     pool (shared, or per namespace with io_workers), except for the null
//     and memory backends, which complete inline. Data moves between the
//     backend and the binding's registered buffers without copies, and the
//     data path allocates nothing in steady state.
//   - Errors: every failed command of a controller goes into its Error
//     Information log and its status carries the More bit, as nvmet's.
//     Backend errors map to NVMe status as the backend package documents.
//   - Authentication (auth.go): DH-HMAC-CHAP of the admin queue and of
//     every I/O queue of a host with a dhchap_key, or of every host where
//     auth_required is set, by nvmeof/auth's Controller state machine, one
//     per queue; ATR in the Connect response, Authentication Required for
//     everything but Fabrics commands until the queue has authenticated, a
//     per-queue deadline and transaction timeout, keys (literal or files)
//     re-read by every reload. Stricter than nvmet where a forged host NQN
//     could hurt the real host: see auth.go.
//   - Namespace visibility (auth_visibility.go): a namespace that lists
//     hosts does not exist for the other hosts of its subsystem.
//
// # Test hooks
//
// TestHooks (hooks.go), set before Start, let a test rewrite, fail, hold or
// drop a command or rewrite a completion: the initiator's tests use them to
// make this controller misbehave. A production target never sets them.
//
// # Concurrency
//
// The binding calls a queue's handler on the queue's engine goroutines,
// which must never block: admin commands are answered there (they touch no
// storage), I/O is handed to workers. Namespace tables are immutable and
// swapped atomically on reload, and a namespace being replaced is drained
// with a reference count before its backend closes, so the I/O path takes
// no locks but the workers' queue. See server for the lock order.
package target
