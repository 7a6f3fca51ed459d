package connd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// AdminMaxData bounds the data of one admin command sent through the
// control socket (nvme-cli's largest read-only pages fit: Identify 4 KiB,
// Commands Supported and Effects 4 KiB, an ANA log of many groups).
const AdminMaxData = 64 << 10

// adminTimeout bounds one admin command run for the control socket.
const adminTimeout = 30 * time.Second

// AdminCommand is the "admin" op of the control socket: one read-only admin
// command (as nvme admin-passthru with --read) run on the daemon's
// controller.
type AdminCommand struct {
	Opcode  uint8  `json:"opcode"`
	NSID    uint32 `json:"nsid"`
	CDW10   uint32 `json:"cdw10"`
	CDW11   uint32 `json:"cdw11"`
	CDW12   uint32 `json:"cdw12"`
	CDW13   uint32 `json:"cdw13"`
	CDW14   uint32 `json:"cdw14"`
	CDW15   uint32 `json:"cdw15"`
	DataLen int    `json:"data_len"`
}

// adminReply is the answer to an admin op: the completion and the data.
type adminReply struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Result uint32 `json:"result"`         // CQE DW0
	Status uint16 `json:"status"`         // CQE status field (SCT, SC, CRD, M, DNR), without the phase
	Data   []byte `json:"data,omitempty"` // the command's data (base64 in JSON)
	Hint   string `json:"status_name,omitempty"`
}

// adminOpRequest is the control socket request of the admin op.
type adminOpRequest struct {
	Op    string        `json:"op"`
	Admin *AdminCommand `json:"admin"`
}

// validate refuses anything but the read-only admin commands nvme-cli's
// query commands send, with a bounded, consistent data length.
func (a *AdminCommand) validate() error {
	if a.DataLen < 0 || a.DataLen > AdminMaxData {
		return fmt.Errorf("data length %d out of range (0..%d)", a.DataLen, AdminMaxData)
	}
	switch a.Opcode {
	case nvmeof.AdminIdentify:
		if a.DataLen != nvmeof.IdentifyDataSize {
			return fmt.Errorf("identify: data length %d, want %d", a.DataLen, nvmeof.IdentifyDataSize)
		}
	case nvmeof.AdminGetLogPage:
		// NUMD (NUMDL in CDW10 31:16, NUMDU in CDW11 15:0) is 0's based
		// dwords (NVMe 2.0 5.16).
		numd := int(a.CDW10>>16) | int(a.CDW11&0xFFFF)<<16
		if want := (numd + 1) * 4; want != a.DataLen {
			return fmt.Errorf("get log page: NUMD asks %d bytes, data length is %d", want, a.DataLen)
		}
	case nvmeof.AdminGetFeatures:
		if a.DataLen > nvmeof.IdentifyDataSize {
			return fmt.Errorf("get features: data length %d over %d", a.DataLen, nvmeof.IdentifyDataSize)
		}
	default:
		return fmt.Errorf("opcode %#02x not allowed: only Identify, Get Log Page and Get Features", a.Opcode)
	}
	return nil
}

// handleAdmin answers the control socket's admin op; line is the request.
func (d *daemon) handleAdmin(line []byte, enc *json.Encoder) {
	var req adminOpRequest
	if err := json.Unmarshal(line, &req); err != nil || req.Admin == nil {
		_ = enc.Encode(adminReply{Error: "bad admin request"})
		return
	}
	a := req.Admin
	if err := a.validate(); err != nil {
		_ = enc.Encode(adminReply{Error: "admin: " + err.Error()})
		return
	}
	if d.ctrl == nil {
		_ = enc.Encode(adminReply{Error: "admin: no controller"})
		return
	}
	var sqe nvmeof.SQE
	sqe.SetOpcode(a.Opcode)
	sqe.SetFlags(nvmeof.FlagPSDTSGL) // the transport fills SGL1
	sqe.SetNSID(a.NSID)
	for i, v := range []uint32{a.CDW10, a.CDW11, a.CDW12, a.CDW13, a.CDW14, a.CDW15} {
		sqe.SetCDW(10+i, v)
	}
	data := make([]byte, a.DataLen)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	cqe, err := d.ctrl.AdminCommand(ctx, &sqe, data, false)
	st := cqe.Status()
	r := adminReply{OK: true, Result: cqe.Result(), Status: uint16(st)}
	if st != 0 {
		r.Hint = st.Name()
		r.Data = nil
	} else if err != nil {
		r = adminReply{Error: "admin: " + err.Error()}
	} else {
		r.Data = data
	}
	_ = enc.Encode(r)
}

// StatusError is a command the controller completed with an error
// status.
type StatusError struct {
	status nvmeof.Status
	name   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("NVMe status: %s(%#x)", e.name, uint16(e.status))
}

// Admin sends one admin command to the daemon of controller dev (of s)
// and returns the completion's DW0 and the data; a completion with an
// error status is a *StatusError.
func Admin(s hoststate.Store, dev string, a AdminCommand) (uint32, []byte, error) {
	c, err := net.DialTimeout("unix", filepath.Join(s.InstanceDir(dev), "ctl.sock"), 5*time.Second)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: no such controller (daemon not reachable: %w)", dev, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(adminTimeout + 10*time.Second))
	b, _ := json.Marshal(adminOpRequest{Op: "admin", Admin: &a})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return 0, nil, fmt.Errorf("%s: %w", dev, err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return 0, nil, fmt.Errorf("%s: no answer from the daemon: %w", dev, err)
	}
	var rep adminReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return 0, nil, fmt.Errorf("%s: bad answer: %w", dev, err)
	}
	if !rep.OK {
		return 0, nil, fmt.Errorf("%s: %s", dev, rep.Error)
	}
	if rep.Status != 0 {
		return rep.Result, nil, &StatusError{status: nvmeof.Status(rep.Status), name: rep.Hint}
	}
	if len(rep.Data) != a.DataLen {
		return 0, nil, fmt.Errorf("%s: daemon returned %d bytes, want %d", dev, len(rep.Data), a.DataLen)
	}
	return rep.Result, rep.Data, nil
}

// Identify reads one Identify data structure (CNS cns, NSID nsid).
func Identify(s hoststate.Store, dev string, cns uint8, nsid uint32) ([]byte, error) {
	_, b, err := Admin(s, dev, AdminCommand{Opcode: nvmeof.AdminIdentify, NSID: nsid, CDW10: uint32(cns), DataLen: nvmeof.IdentifyDataSize})
	return b, err
}

// GetLog reads n bytes of log page lid (RAE set: reading a page here
// never clears an event the daemon waits for).
func GetLog(s hoststate.Store, dev string, lid uint8, nsid uint32, lsp uint8, lpo uint64, n int) ([]byte, error) {
	return GetLogCSI(s, dev, lid, nsid, lsp, lpo, n, 0)
}

// GetLogCSI is GetLog for command set csi.
func GetLogCSI(s hoststate.Store, dev string, lid uint8, nsid uint32, lsp uint8, lpo uint64, n int, csi uint8) ([]byte, error) {
	if n <= 0 || n%4 != 0 || n > AdminMaxData {
		return nil, fmt.Errorf("log length %d: must be a multiple of 4 in 4..%d", n, AdminMaxData)
	}
	var sqe nvmeof.SQE
	cmd := sqe.BuildGetLogPage(lid, nsid, lpo, uint32(n))
	cmd.SetRAE(true)
	cmd.SetLSP(lsp)
	cmd.SetCSI(csi)
	a := AdminCommand{Opcode: nvmeof.AdminGetLogPage, NSID: nsid, DataLen: n,
		CDW10: sqe.CDW(10), CDW11: sqe.CDW(11), CDW12: sqe.CDW(12), CDW13: sqe.CDW(13), CDW14: sqe.CDW(14), CDW15: sqe.CDW(15)}
	_, b, err := Admin(s, dev, a)
	return b, err
}

// ErrorLogLength is the length of the Error Information log nvme-cli's
// error-log reads for entries entries of controller c: at most ELPE+1
// entries (0's based), within AdminMaxData.
func ErrorLogLength(c *nvmeof.IdentifyController, entries uint32) int {
	if max := uint32(c[262]) + 1; entries > max {
		entries = max
	}
	n := int(entries) * nvmeof.ErrorLogEntrySize
	if n > AdminMaxData {
		n = AdminMaxData / nvmeof.ErrorLogEntrySize * nvmeof.ErrorLogEntrySize
	}
	return n
}

// ANALogLength is nvme-cli's length of controller c's ANA log and its
// LSP: the header, NANAGRPID descriptors and (without groups, "-g") NN
// namespace IDs, within AdminMaxData; groups sets RGO (return groups only).
func ANALogLength(c *nvmeof.IdentifyController, groups bool) (n int, lsp uint8) {
	n = nvmeof.ANALogHeaderSize + int(c.NANAGRPID())*32
	if groups {
		lsp = 1 // RGO: return groups only
	} else {
		n += int(c.NN()) * 4
	}
	if n > AdminMaxData {
		n = AdminMaxData
	}
	return n, lsp
}

// GetFeaturesCommand is nvme-cli's get-feature command: feature fid, select
// sel, UUID index uuid, CDW11 cdw11, and dataLen bytes of data (0: the
// feature's own length, featureDataLen).
func GetFeaturesCommand(nsid uint32, fid, sel, uuid uint8, cdw11, dataLen uint32) AdminCommand {
	n := dataLen
	if n == 0 {
		n = featureDataLen(fid, cdw11)
	}
	a := AdminCommand{Opcode: nvmeof.AdminGetFeatures, NSID: nsid, CDW10: uint32(sel)<<8 | uint32(fid), CDW11: cdw11, CDW14: uint32(uuid & 0x7f), DataLen: int(n)}
	if fid == 0x81 && cdw11 == 0 && dataLen == 0 {
		a.CDW11 = 1 // EXHID: the 128-bit host identifier of NVMe-oF (NVMe 2.0 5.27.1.28)
	}
	return a
}

// featureDataLen is nvme-cli's data length of a feature (get_feat_buf_len).
func featureDataLen(fid uint8, cdw11 uint32) uint32 {
	switch fid {
	case 0x03: // LBA Range Type
		return 4096
	case 0x0c: // Autonomous Power State Transition
		return 256
	case 0x0e: // Timestamp
		return 8
	case 0x16: // Host Behavior Support
		return 512
	case 0x81: // Host Identifier
		if cdw11&1 != 0 || cdw11 == 0 {
			return 16
		}
		return 8
	}
	return 0
}
