// Package nvmeof holds the NVMe and NVMe over Fabrics wire structures that an
// NVMe/RDMA target and initiator exchange: submission and completion queue
// entries (SQE, CQE), SGL descriptors, the admin, NVM I/O and Fabrics commands,
// the data structures they carry (Identify, log pages, features, Connect data),
// the controller properties (CAP, VS, CC, CSTS), NVMe status codes, NQNs and
// the host identity.
//
// # Design
//
// Fixed-size structures are byte arrays with accessors, in the spirit of
// gVisor's pkg/tcpip/header: a [SQE] is a [64]byte, an [IdentifyController] is a
// [4096]byte, and each field has a getter and a setter that read and write the
// little-endian wire bytes in place. Nothing is copied into Go structs on the
// data path and the accessors never allocate. A view over received bytes is
// made with the Parse function of the type (for example [ParseSQE]), which
// checks the length and returns a pointer aliasing the input.
//
// Command-specific fields are reached through small typed views that embed
// the *SQE, for example [SQE.IdentifyCmd] or [SQE.RWCmd]; the host side fills
// commands in place with the Build methods ([SQE.BuildRead],
// [SQE.BuildConnect], ...).
//
// Variable-length structures (discovery log, ANA log, namespace descriptor
// list, changed namespace list, DSM ranges) have Append/Encode functions and
// Parse functions that check every length before slicing and return an
// error, never panic, on truncated or malformed input.
//
// # Errors and status
//
// [Status] is the Linux pre-shift NVMe status value (SC, SCT, CRD, More, DNR)
// and implements error, so a target's handlers return a Status (possibly
// wrapped) and [StatusFromError] turns any error into the status to put in the
// completion. Decoders of data that a controller receives (SGL, Connect data,
// DSM ranges) return errors that wrap the Status Linux nvmet would answer with.
//
// # References
//
// Section numbers like "protocol.md §9.1" refer to the project's wire reference
// (shared/docs/protocol.md); "NVMe Base 2.0 §5.17" and "NVMe-oF 1.1 §3.3" refer
// to the NVM Express specifications; Linux file names refer to the kernel
// sources (include/linux/nvme.h, drivers/nvme/host, drivers/nvme/target).
package nvmeof
