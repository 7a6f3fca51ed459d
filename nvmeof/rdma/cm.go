// Package rdma is the NVMe/RDMA transport binding (NVMe-oF 1.1 §7.3, the
// "RDMA Transport Binding") on nvmetd's iWARP verbs: the RDMA CM private
// data that opens each queue, the controller side of a queue (command
// capsules in, data by RDMA READ/WRITE, response capsules out) and the host
// side (commands out with keyed SGLs or in-capsule data, completions in).
//
// One NVMe queue (admin or I/O) is one iWARP QP, i.e. one TCP connection.
// The sizes and rules follow what Linux nvme-rdma (host) and nvmet-rdma
// (target) do; see protocol.md §8.
package rdma

import (
	"encoding/binary"
	"fmt"
)

// NVMe/RDMA CM private data (NVMe-oF 1.1 §7.3.4, Linux nvme-rdma.h). All
// fields are little-endian; it travels as MPA private data behind the MPA
// v2 IRD/ORD word.
const (
	// CMRequestLen is the size of the host's connect request data.
	CMRequestLen = 32
	// CMAcceptLen is the size of the controller's accept data.
	CMAcceptLen = 32
	// CMRejectLen is the size of the controller's reject data.
	CMRejectLen = 4
	// RecFmt is the only record format (RECFMT 0).
	RecFmt = 0
)

// CMRequest is the host's RDMA CM connect request private data.
type CMRequest struct {
	RecFmt uint16
	QID    uint16 // 0 = admin queue
	// HRQSize is the host receive queue size (1's based): how many response
	// capsules the host can take at once.
	HRQSize uint16
	// HSQSize is the host send queue size (0's based): at most HSQSize+1
	// commands are outstanding, so the controller posts that many receives.
	HSQSize uint16
	// CNTLID is NVMe-oF 1.1's controller ID; Linux sends 0 (reserved).
	CNTLID uint16
}

// Append encodes the request at the end of b.
func (r *CMRequest) Append(b []byte) []byte {
	var p [CMRequestLen]byte
	binary.LittleEndian.PutUint16(p[0:], r.RecFmt)
	binary.LittleEndian.PutUint16(p[2:], r.QID)
	binary.LittleEndian.PutUint16(p[4:], r.HRQSize)
	binary.LittleEndian.PutUint16(p[6:], r.HSQSize)
	binary.LittleEndian.PutUint16(p[8:], r.CNTLID)
	return append(b, p[:]...)
}

// ParseCMRequest decodes a connect request. Errors are *CMRejectError with
// the status nvmet-rdma rejects with; it checks what nvmet checks (length,
// RECFMT). Queue sizes are judged by the caller, who knows its limits.
func ParseCMRequest(b []byte) (CMRequest, error) {
	var r CMRequest
	if len(b) < CMRequestLen {
		return r, &CMRejectError{Status: CMRejectInvalidPrivateDataLen, Msg: fmt.Sprintf("%d bytes of private data, need %d", len(b), CMRequestLen)}
	}
	r.RecFmt = binary.LittleEndian.Uint16(b[0:])
	r.QID = binary.LittleEndian.Uint16(b[2:])
	r.HRQSize = binary.LittleEndian.Uint16(b[4:])
	r.HSQSize = binary.LittleEndian.Uint16(b[6:])
	r.CNTLID = binary.LittleEndian.Uint16(b[8:])
	if r.RecFmt != RecFmt {
		return r, &CMRejectError{Status: CMRejectInvalidRecFmt, Msg: fmt.Sprintf("RECFMT %d", r.RecFmt)}
	}
	return r, nil
}

// CMAccept is the controller's accept private data.
type CMAccept struct {
	RecFmt uint16
	// CRQSize is the controller receive queue size: the receives it posted
	// (nvmet: HSQSize+1). The Linux host ignores it.
	CRQSize uint16
}

// Append encodes the accept data at the end of b.
func (a *CMAccept) Append(b []byte) []byte {
	var p [CMAcceptLen]byte
	binary.LittleEndian.PutUint16(p[0:], a.RecFmt)
	binary.LittleEndian.PutUint16(p[2:], a.CRQSize)
	return append(b, p[:]...)
}

// ParseCMAccept decodes accept data. A controller may send fewer than 32
// bytes; at least the two fields are needed.
func ParseCMAccept(b []byte) (CMAccept, error) {
	if len(b) < 4 {
		return CMAccept{}, fmt.Errorf("nvme-rdma: accept private data of %d bytes, need at least 4", len(b))
	}
	a := CMAccept{RecFmt: binary.LittleEndian.Uint16(b[0:]), CRQSize: binary.LittleEndian.Uint16(b[2:])}
	if a.RecFmt != RecFmt {
		return a, fmt.Errorf("nvme-rdma: accept with RECFMT %d", a.RecFmt)
	}
	return a, nil
}

// CMRejectStatus is the status of a controller's CM reject (NVMe-oF 1.1
// Figure 57; Linux enum nvme_rdma_cm_status).
type CMRejectStatus uint16

// Reject statuses.
const (
	CMRejectInvalidPrivateDataLen CMRejectStatus = 0x01
	CMRejectInvalidRecFmt         CMRejectStatus = 0x02
	CMRejectInvalidQID            CMRejectStatus = 0x03
	CMRejectInvalidHSQSize        CMRejectStatus = 0x04
	CMRejectInvalidHRQSize        CMRejectStatus = 0x05
	CMRejectNoResources           CMRejectStatus = 0x06
	CMRejectInvalidIRD            CMRejectStatus = 0x07
	CMRejectInvalidORD            CMRejectStatus = 0x08
)

var cmRejectNames = map[CMRejectStatus]string{
	CMRejectInvalidPrivateDataLen: "invalid private data length",
	CMRejectInvalidRecFmt:         "invalid RECFMT",
	CMRejectInvalidQID:            "invalid QID",
	CMRejectInvalidHSQSize:        "invalid HSQSIZE",
	CMRejectInvalidHRQSize:        "invalid HRQSIZE",
	CMRejectNoResources:           "no resources",
	CMRejectInvalidIRD:            "invalid IRD",
	CMRejectInvalidORD:            "invalid ORD",
}

// String names the status.
func (s CMRejectStatus) String() string {
	if n, ok := cmRejectNames[s]; ok {
		return n
	}
	return fmt.Sprintf("reject status %#x", uint16(s))
}

// AppendCMReject encodes reject data at the end of b.
func AppendCMReject(b []byte, st CMRejectStatus) []byte {
	b = binary.LittleEndian.AppendUint16(b, RecFmt)
	return binary.LittleEndian.AppendUint16(b, uint16(st))
}

// ParseCMReject decodes reject data.
func ParseCMReject(b []byte) (CMRejectStatus, error) {
	if len(b) < CMRejectLen {
		return 0, fmt.Errorf("nvme-rdma: reject private data of %d bytes, need %d", len(b), CMRejectLen)
	}
	return CMRejectStatus(binary.LittleEndian.Uint16(b[2:])), nil
}

// CMRejectError is a queue connection refused at the CM level, by us or by
// the controller.
type CMRejectError struct {
	Status CMRejectStatus
	Msg    string
}

func (e *CMRejectError) Error() string {
	if e.Msg == "" {
		return "nvme-rdma: connection rejected: " + e.Status.String()
	}
	return "nvme-rdma: connection rejected: " + e.Status.String() + ": " + e.Msg
}
