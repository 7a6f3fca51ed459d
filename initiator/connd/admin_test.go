package connd

import (
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestAdminCmdValidate: the control socket's admin op allows the
// read-only commands only, with a bounded, consistent data length.
func TestAdminCmdValidate(t *testing.T) {
	ok := []AdminCommand{
		{Opcode: nvmeof.AdminIdentify, CDW10: 1, DataLen: 4096},
		{Opcode: nvmeof.AdminGetLogPage, CDW10: 2 | 127<<16, DataLen: 512},
		{Opcode: nvmeof.AdminGetLogPage, CDW10: 0xc | 16383<<16, DataLen: 64 << 10}, // 64 KiB: NUMD 16383
		{Opcode: nvmeof.AdminGetFeatures, CDW10: 7},
		{Opcode: nvmeof.AdminGetFeatures, CDW10: 0x81, CDW11: 1, DataLen: 16},
	}
	for _, a := range ok {
		if err := a.validate(); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
	bad := []AdminCommand{
		{Opcode: nvmeof.AdminSetFeatures, CDW10: 7},
		{Opcode: nvmeof.AdminFormatNVM},
		{Opcode: nvmeof.AdminSanitize},
		{Opcode: nvmeof.AdminNSManagement},
		{Opcode: nvmeof.AdminFWCommit},
		{Opcode: nvmeof.AdminSecuritySend},
		{Opcode: nvmeof.AdminKeepAlive},
		{Opcode: nvmeof.AdminIdentify, CDW10: 1, DataLen: 8192},
		{Opcode: nvmeof.AdminIdentify, CDW10: 1, DataLen: -1},
		{Opcode: nvmeof.AdminGetLogPage, CDW10: 2 | 127<<16, DataLen: 508},
		{Opcode: nvmeof.AdminGetLogPage, CDW10: 2 | 0xffff<<16, CDW11: 1, DataLen: 1 << 19},
		{Opcode: nvmeof.AdminGetFeatures, CDW10: 3, DataLen: 8192},
	}
	for _, a := range bad {
		if err := a.validate(); err == nil {
			t.Errorf("%+v: allowed", a)
		}
	}
}

// TestAdminCommandShapes: the lengths and dwords of the commands nvme-cli's
// error-log, ana-log and get-feature send (nvme-cli 2.3: ELPE+1 entries at
// most, the ANA header with NANAGRPID descriptors and NN NSIDs, RGO for -g,
// get_feat_buf_len, EXHID for the Host Identifier).
func TestAdminCommandShapes(t *testing.T) {
	var c nvmeof.IdentifyController
	c[262] = 3 // ELPE: 4 entries
	c.SetNANAGRPID(2)
	c.SetNN(10)
	if n := ErrorLogLength(&c, 64); n != 4*nvmeof.ErrorLogEntrySize {
		t.Errorf("error log of 64 entries with ELPE 3: %d bytes", n)
	}
	c[262] = 255
	if n := ErrorLogLength(&c, 1000); n > AdminMaxData || n%nvmeof.ErrorLogEntrySize != 0 {
		t.Errorf("error log of 1000 entries: %d bytes", n)
	}
	if n, lsp := ANALogLength(&c, false); n != nvmeof.ANALogHeaderSize+2*32+10*4 || lsp != 0 {
		t.Errorf("ana log: %d bytes, lsp %d", n, lsp)
	}
	if n, lsp := ANALogLength(&c, true); n != nvmeof.ANALogHeaderSize+2*32 || lsp != 1 {
		t.Errorf("ana log -g: %d bytes, lsp %d", n, lsp)
	}
	for _, tc := range []struct {
		fid            uint8
		cdw11, dataLen uint32
		wantLen        int
		wantCDW11      uint32
	}{
		{0x81, 0, 0, 16, 1}, // Host Identifier: EXHID, 128 bits
		{0x81, 2, 0, 8, 2},  // the 64-bit form asked for
		{0x03, 0, 0, 4096, 0},
		{0x07, 0, 0, 0, 0},   // Number of Queues: no data
		{0x0e, 0, 64, 64, 0}, // a given length wins
	} {
		a := GetFeaturesCommand(1, tc.fid, 2, 0x85, tc.cdw11, tc.dataLen)
		if a.Opcode != nvmeof.AdminGetFeatures || a.DataLen != tc.wantLen || a.CDW11 != tc.wantCDW11 ||
			a.CDW10 != 2<<8|uint32(tc.fid) || a.CDW14 != 0x05 || a.NSID != 1 || a.validate() != nil {
			t.Errorf("fid %#x cdw11 %d len %d: %+v (%v)", tc.fid, tc.cdw11, tc.dataLen, a, a.validate())
		}
	}
}
