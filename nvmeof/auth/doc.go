// Package auth implements NVMe in-band authentication, DH-HMAC-CHAP (NVMe
// Base 2.0 §8.13, TP 8006), for NVMe over Fabrics hosts and controllers,
// interoperable with Linux. It is pure: no file or network I/O, no
// goroutines, no clock; randomness comes in through an io.Reader.
//
// It has four parts:
//
//   - Codecs of the messages that Fabrics Authentication Send and
//     Authentication Receive commands carry (SECP 0xE9, SPSP0 = SPSP1 = 1;
//     the SQE accessors are nvmeof.AuthCmd, nvmeof.SQE.BuildAuthSend and
//     BuildAuthReceive): AUTH_Negotiate, DH-HMAC-CHAP_Challenge, _Reply,
//     _Success1, _Success2, AUTH_Failure1 and AUTH_Failure2, each with an
//     Append and a Parse function in the layout of Linux's struct
//     nvmf_auth_dhchap_* (include/linux/nvme.h). Parse functions check every
//     length before slicing and return errors wrapping nvmeof.ErrTruncated or
//     nvmeof.ErrMalformed, never panic.
//   - The cryptography: HMAC with SHA-256/384/512, the RFC 7919 groups
//     ffdhe2048..ffdhe8192 with constant-time exponentiation
//     (filippo.io/bigmod) and public value checks, the key transformation,
//     the host and controller responses, the augmented challenge and the
//     generated PSK, as drivers/nvme/common/auth.c computes them; the secret
//     representation "DHHC-1:<hh>:<base64>:" and key generation equal to
//     nvme-cli's gen-dhchap-key.
//   - Host, the host's state machine for one queue (drivers/nvme/host/auth.c
//     nvme_queue_auth_work), unidirectional or bidirectional (controller)
//     authentication. The caller submits the Authentication Send/Receive
//     commands a HostStep asks for and feeds back their completions.
//   - Controller, the controller's state machine for one queue
//     (drivers/nvme/target/fabrics-cmd-auth.c and auth.c): it answers the
//     queue's Authentication Send and Receive commands with a Result (the
//     completion status, the message to return, the timer to arm or stop,
//     whether to tear the controller down), with nvmet's sequence checks and
//     failure answers.
//
// # Wiring
//
// A target that requires authentication for a host sets ATR
// (nvmeof.ConnectATR) in the Connect response of the admin queue and of
// every I/O queue, gives each queue a Controller, refuses the commands
// RequiresAuthentication names with StatusAuthRequired|DNR until
// Controller.Authenticated, arms the queue's timer as Results say and calls
// Controller.Expire when it fires. A host that sees ATR runs a Host
// transaction on that queue before using it, and again on every queue to
// re-authenticate. Both keep one Host or Controller per queue; transaction
// IDs are the host's (Linux counts them per controller).
//
// # Deviations from Linux
//
// Where Linux is lax this package is strict, without changing anything a
// Linux peer sees when it follows the protocol: a controller refuses a
// host that does not offer the configured DH group (nvmet would use it
// anyway; Linux hosts offer every group); a host refuses a challenge with a
// hash or group it did not offer, and a Success1 without the controller's
// response after it asked for one (a Linux host accepts it); a host answers
// an unexpected message with AUTH_Failure2 where Linux just stops; public
// DH values equal to p-1 are refused (Linux refuses them only in FIPS
// mode). A controller answers an AUTH_Failure2 and every out-of-sequence
// message by tearing the controller down, as nvmet does, and says why. The
// controller makes a fresh DH key for every transaction, where nvmet keeps
// one per controller.
//
// # References
//
// "NVMe Base 2.0 §8.13.5.x" is the NVM Express Base Specification 2.0
// (DH-HMAC-CHAP protocol); Linux file names are those of the kernel
// sources (v6.1 .. v6.12): include/linux/nvme.h, include/linux/nvme-auth.h,
// drivers/nvme/common/auth.c, drivers/nvme/host/auth.c,
// drivers/nvme/target/auth.c, drivers/nvme/target/fabrics-cmd-auth.c and
// crypto/dh.c; nvme-cli's is nvme.c (gen-dhchap-key, check-dhchap-key).
package auth
