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
