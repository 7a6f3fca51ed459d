package nvmeof

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestStatusFields(t *testing.T) {
	s := StatusInvalidField | StatusDNR
	if s != 0x4002 || s.sc() != 0x02 || s.SCT() != SCTGeneric || !s.DNR() || s.More() || s.CRD() != 0 {
		t.Errorf("%#x sc %#x sct %d", uint16(s), s.sc(), s.SCT())
	}
	if s.Wire() != 0x8004 || StatusFromWire(0x8005) != s {
		t.Errorf("wire %#x", s.Wire())
	}
	if got := s.Error(); got != "nvme status 0x4002: invalid field in command (DNR)" {
		t.Errorf("%q", got)
	}
	c := StatusConnectInvalidHost.withDNR().withCRD(2) | StatusMore
	if c.SCT() != SCTCommand || c.sc() != 0x84 || c.CRD() != 2 || !c.More() || !c.DNR() || c.Code() != StatusConnectInvalidHost {
		t.Errorf("%v", c)
	}
	if got := c.Error(); got != "nvme status 0x7184: connect invalid host (DNR, more, CRD 2)" {
		t.Errorf("%q", got)
	}
	if StatusAccessDenied.SCT() != SCTMedia || StatusANATransition.SCT() != SCTPath {
		t.Error("SCT of media/path status")
	}
	if got := Status(0x0FF).Error(); got != "nvme status 0x0ff: unknown generic status" {
		t.Errorf("%q", got)
	}
	if got := Status(0x700).Name(); got != "vendor specific status" {
		t.Errorf("%q", got)
	}
	if got := StatusConnectInvalidParameters.Name(); got != "attempted write to read only range / connect invalid parameters" {
		t.Errorf("%q", got)
	}
	if StatusSuccess.Err() != nil || (StatusSuccess|StatusDNR).Err() != nil || StatusInternalError.Err() == nil {
		t.Error("Err")
	}
	// Every status in the NVMe/Linux tables has a name.
	for _, s := range []Status{StatusInvalidQID, StatusAbortRequested, StatusNamespaceNotReady, StatusInvalidLogPage,
		StatusInvalidFormat, StatusFeatureNotSaveable, StatusCommandInterrupted, StatusANAInaccessible,
		StatusANAPersistentLoss, StatusANATransition, StatusAccessDenied, StatusConnectIncompatibleFormat,
		StatusConnectControllerBusy, StatusConnectRestartDiscovery, StatusDiscoverRestart, StatusAuthRequired,
		StatusKeepAliveExpired, StatusKeepAliveInvalid, StatusSGLInvalidData, StatusSGLInvalidType,
		StatusSGLInvalidOffset, StatusLBAOutOfRange, StatusCapacityExceeded, StatusWriteFault,
		StatusUnrecoveredReadError, StatusHostPathError} {
		if _, ok := statusNames[s]; !ok {
			t.Errorf("no name for %#x", uint16(s))
		}
	}
}

func TestStatusFromError(t *testing.T) {
	wrapped := fmt.Errorf("backend: %w", StatusLBAOutOfRange|StatusDNR)
	for _, tc := range []struct {
		err  error
		want Status
	}{
		{nil, StatusSuccess},
		{StatusInvalidOpcode, StatusInvalidOpcode},
		{wrapped, StatusLBAOutOfRange | StatusDNR},
		{io.ErrUnexpectedEOF, StatusInternalError},
		{&SGLError{Status: StatusSGLInvalidType | StatusDNR}, StatusSGLInvalidType | StatusDNR},
		{&ConnectParamError{InData: true, Offset: 0x100}, StatusConnectInvalidParameters | StatusDNR},
		{errors.Join(io.EOF, StatusAbortRequested), StatusAbortRequested},
	} {
		if got := StatusFromError(tc.err); got != tc.want {
			t.Errorf("StatusFromError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func FuzzStatus(f *testing.F) {
	for _, w := range []uint16{0, 0x8004, 0x8305, 0xFFFF, 0x0E02} {
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, w uint16) {
		s := StatusFromWire(w)
		if s.Error() == "" || s.Name() == "" {
			t.Fatal("empty message")
		}
		if s.Wire()|w&1 != w {
			t.Fatalf("wire round trip %#x -> %#x", w, s.Wire())
		}
		if s.Code()|Status(s.CRD())<<11|s&(StatusMore|StatusDNR) != s {
			t.Fatalf("fields do not recompose %#x", uint16(s))
		}
		var c CQE
		c.setPhase(w&1 != 0)
		c.SetStatus(s)
		if c.RawStatus() != w || c.Status() != s {
			t.Fatalf("CQE status %#x, want %#x", c.RawStatus(), w)
		}
	})
}
