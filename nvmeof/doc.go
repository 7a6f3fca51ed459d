// Package nvmeof holds the NVMe and NVMe over Fabrics wire structures that an
// NVMe/RDMA target and initiator exchange: submission and completion queue
// entries (SQE, CQE), SGL descriptors, the admin, NVM I/O and Fabrics commands,
// the data structures they carry (Identify, log pages, features, Connect data),
// the controller properties (CAP, VS, CC, CSTS), NVMe status codes and NQNs.
// It is pure: no file, network or system I/O (the host identity of this
// machine is package initiator's).
//
// # API
//
// The exported names are what nvmetd's target, initiator and transport
// binding use, and nothing else: the views of the fixed-size structures with
// accessors for the fields they read or write, the command builders and
// command views, the Parse/Append/Encode/Decode codecs of every structure
// received or sent (each has golden bytes and a fuzz target), [Status] and
// the errors, and the protocol constants in use. Fields and values of the
// specification that nothing here uses are not exported (those the tests
// check against golden bytes are unexported accessors) or not defined at
// all: add them, with their golden test, when a feature needs them.
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
