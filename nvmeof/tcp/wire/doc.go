// Package wire holds the NVMe/TCP PDU codecs (NVM Express TCP Transport
// Specification, revision 1.0; "TCP 1.0 §x" in comments): pure functions
// over byte slices, no I/O. The transport binding that drives them lives
// beside it in nvmeof/tcp.
//
// A PDU is an 8-byte common header (type, flags, HLEN, PDO, PLEN), the rest
// of its PDU-specific header (HLEN bytes in all), an optional header digest
// (CRC32C of the HLEN bytes), padding up to PDO, data, and an optional data
// digest (CRC32C of the data). Digests are negotiated per queue in the
// ICReq/ICResp exchange (TCP 1.0 §3.6.2.2, §3.6.2.3) and are then present on
// every PDU that can carry them (never on ICReq, ICResp or the TermReqs).
//
// Decoders return a *FatalError for a header that breaks a rule: its FES
// and FEI are what the receiver puts in the H2CTermReq or C2HTermReq it
// sends before closing the connection (TCP 1.0 §3.6.2.9, §3.6.2.10, §3.4.4).
//
// Golden vectors: testdata/golden holds Linux nvme-tcp ⇄ nvmet-tcp
// exchanges captured in the lab VM (6.1 and 6.12, with and without
// digests; testdata/capture/capture.sh).
package wire
