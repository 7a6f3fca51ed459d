package auth

import (
	"fmt"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// CheckCommand checks an Authentication Send or Receive SQE the way nvmet
// does before it transfers any data (drivers/nvme/target/fabrics-cmd-auth.c
// nvmet_execute_auth_send/_receive): SECP 0xE9, SPSP0 and SPSP1 1 and a
// non-zero TL/AL, each else Invalid Field in Command with DNR; then
// xferLen, the length of the command's data SGL, must equal TL/AL, else
// Data SGL Length Invalid with DNR (nvmet_check_transfer_len). It returns
// TL or AL; the errors are *CommandError.
func CheckCommand(s *nvmeof.SQE, xferLen uint32) (uint32, error) {
	if !s.IsAuth() {
		return 0, &CommandError{Status: nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR, Offset: 4,
			Reason: fmt.Sprintf("not an authentication command (opcode %#02x fctype %#02x)", s.Opcode(), s.FCType())}
	}
	c := s.AuthCmd()
	field := func(off uint16, format string, args ...any) error {
		return &CommandError{Status: nvmeof.StatusInvalidField | nvmeof.StatusDNR, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.SECP() != nvmeof.AuthProtocolDHCHAP:
		return 0, field(nvmeof.AuthSQEOffSECP, "SECP %#02x, want %#02x", c.SECP(), nvmeof.AuthProtocolDHCHAP)
	case c.SPSP0() != SPSP:
		return 0, field(nvmeof.AuthSQEOffSPSP0, "SPSP0 %#02x, want %#02x", c.SPSP0(), SPSP)
	case c.SPSP1() != SPSP:
		return 0, field(nvmeof.AuthSQEOffSPSP1, "SPSP1 %#02x, want %#02x", c.SPSP1(), SPSP)
	case c.Length() == 0:
		return 0, field(nvmeof.AuthSQEOffTL, "transfer length 0")
	case c.Length() != xferLen:
		return 0, &CommandError{Status: nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR, Offset: 24,
			Reason: fmt.Sprintf("data SGL of %d bytes for a transfer length of %d", xferLen, c.Length())}
	}
	return c.Length(), nil
}

// RequiresAuthentication reports whether a controller that requires
// authentication must refuse s on a queue not (yet) authenticated, with
// StatusAuthRequired|StatusDNR: every command but the Fabrics commands
// (Connect, Property Get/Set, Authentication Send/Receive), as nvmet's
// nvmet_check_auth_status in nvmet_parse_admin_cmd and nvmet_parse_io_cmd.
func RequiresAuthentication(s *nvmeof.SQE) bool { return !s.IsFabrics() }
