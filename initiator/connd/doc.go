// Package connd is the host tool's connection daemon ("nvmeof serve"):
// one process per connected subsystem that keeps the association (keep
// alive, reconnection, more paths through initiator.Subsystem), exposes
// each namespace as a block-device file through FUSE (initiator/fusedev),
// attaches and mounts it if asked (initiator/hostfs), publishes its state
// in the runtime directory (initiator/hoststate), serves its metrics and
// answers its control socket.
//
// The package holds both ends of the control socket: Serve is the daemon,
// Start launches it from connect (re-executing this program as "nvmeof
// serve"), Call, Admin and Disconnect are the commands' side. The socket
// speaks one JSON line per request and per answer (Request, Response; the
// "admin" op is AdminCommand and AdminReply); connect's options travel as
// Options' JSON (the daemon's --config argument and the add-path request),
// the DH-HMAC-CHAP secrets on the daemon's standard input (ReadSecrets),
// never on its command line.
//
// FabricsOptions are nvme-cli's fabrics options; Config turns them into an
// initiator.Config (host identity, nvmetd's default host key, transport
// knobs).
package connd
