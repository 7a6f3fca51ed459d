package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// adminMaxData bounds the data of one admin command sent through the
// control socket (nvme-cli's largest read-only pages fit: Identify 4 KiB,
// Commands Supported and Effects 4 KiB, an ANA log of many groups).
const adminMaxData = 64 << 10

// adminTimeout bounds one admin command run for the control socket.
const adminTimeout = 30 * time.Second

// adminCmd is the "admin" op of the control socket: one read-only admin
// command (as nvme admin-passthru with --read) run on the daemon's
// controller.
type adminCmd struct {
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
	Op    string    `json:"op"`
	Admin *adminCmd `json:"admin"`
}

// validate refuses anything but the read-only admin commands nvme-cli's
// query commands send, with a bounded, consistent data length.
func (a *adminCmd) validate() error {
	if a.DataLen < 0 || a.DataLen > adminMaxData {
		return fmt.Errorf("data length %d out of range (0..%d)", a.DataLen, adminMaxData)
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
