package nvmeof

import (
	"errors"
	"strings"
	"testing"
)

func TestConnectDataLayout(t *testing.T) {
	var d ConnectData
	id, _ := ParseUUID(labHostUUID)
	d.SetHostID(id)
	d.SetCNTLID(0xFFFF)
	d.SetSubNQN("nqn.a")
	d.SetHostNQN("nqn.b")
	if hexs(d[0:18]) != "6e766d656f664c619b00000000000001ffff" || string(d[256:261]) != "nqn.a" || d[261] != 0 ||
		string(d[512:517]) != "nqn.b" || d[517] != 0 {
		t.Errorf("layout %x", d[:20])
	}
	// Truncation keeps the terminator.
	d.SetSubNQN(strings.Repeat("x", 300))
	if d[511] != 0 || len(d.SubNQN()) != 255 {
		t.Error("long NQN not truncated to 255 bytes")
	}
}

func TestConnectDataValidate(t *testing.T) {
	good := loadGolden(t, "connectdata-admin.hex")
	for _, tc := range []struct {
		name   string
		mutate func(d *ConnectData)
		offset uint16
	}{
		{"subnqn not terminated", func(d *ConnectData) { copy(d[256:512], strings.Repeat("n", 256)) }, ConnectDataOffSUBNQN},
		{"subnqn empty", func(d *ConnectData) { d.SetSubNQN("") }, ConnectDataOffSUBNQN},
		{"subnqn too long", func(d *ConnectData) { d.SetSubNQN("nqn." + strings.Repeat("a", 220)) }, ConnectDataOffSUBNQN},
		{"subnqn control char", func(d *ConnectData) { d.SetSubNQN("nqn.2014-08.x\n") }, ConnectDataOffSUBNQN},
		{"hostnqn not terminated", func(d *ConnectData) { copy(d[512:768], strings.Repeat("n", 256)) }, ConnectDataOffHOSTNQN},
		{"hostnqn bad utf-8", func(d *ConnectData) { d.SetHostNQN("nqn.\xff") }, ConnectDataOffHOSTNQN},
		{"hostnqn empty", func(d *ConnectData) { d.SetHostNQN("") }, ConnectDataOffHOSTNQN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			tc.mutate((*ConnectData)(b))
			_, err := ParseConnectData(b)
			var pe *ConnectParamError
			if !errors.As(err, &pe) || !pe.InData || pe.Offset != tc.offset {
				t.Fatalf("err %v", err)
			}
			if StatusFromError(err) != StatusConnectInvalidParameters|StatusDNR || pe.Result() != 1<<16|uint32(tc.offset) {
				t.Errorf("status %v result %#x", StatusFromError(err), pe.Result())
			}
			if r := ConnectResponse(pe.Result()); func() bool { in, off := r.InvalidParam(); return !in || off != tc.offset }() {
				t.Error("InvalidParam decode")
			}
		})
	}
	// A 223-byte NQN is the longest accepted.
	b := append([]byte(nil), good...)
	(*ConnectData)(b).SetHostNQN("nqn." + strings.Repeat("a", NQNMaxLen-4))
	if _, err := ParseConnectData(b); err != nil {
		t.Error(err)
	}
	if _, err := ParseConnectData(good[:1023]); !errors.Is(err, ErrTruncated) || StatusFromError(err) != StatusSGLInvalidData|StatusDNR {
		t.Errorf("short connect data: %v", err)
	}
}

func TestConnectInvalidParamResult(t *testing.T) {
	// The IPO values nvmet uses (protocol.md §9.1).
	for _, tc := range []struct {
		inData bool
		off    uint16
		want   uint32
	}{
		{true, ConnectDataOffCNTLID, 0x10010},
		{true, ConnectDataOffSUBNQN, 0x10100},
		{true, ConnectDataOffHOSTNQN, 0x10200},
		{false, ConnectSQEOffQID, 0x2A},
		{false, ConnectSQEOffSQSIZE, 0x2C},
	} {
		if got := ConnectInvalidParamResult(tc.inData, tc.off); got != tc.want {
			t.Errorf("(%v, %#x) = %#x, want %#x", tc.inData, tc.off, got, tc.want)
		}
	}
	e := &ConnectParamError{Offset: ConnectSQEOffQID, Reason: "queue 9 > max 4"}
	if !strings.Contains(e.Error(), "command offset 0x2a") || e.Result() != 0x2A {
		t.Errorf("%v", e)
	}
	if NewConnectResponse(7).CNTLID() != 7 {
		t.Error("NewConnectResponse")
	}
}

func FuzzConnectData(f *testing.F) {
	for _, name := range []string{"connectdata-disc.hex", "connectdata-admin.hex", "connectdata-io.hex"} {
		f.Add(loadGolden(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseConnectData(b)
		if err != nil {
			if StatusFromError(err) == StatusInternalError {
				t.Fatalf("error without a status: %v", err)
			}
			return
		}
		var e ConnectData
		e.SetHostID(d.HostID())
		e.SetCNTLID(d.CNTLID())
		e.SetSubNQN(d.SubNQN())
		e.SetHostNQN(d.HostNQN())
		d2, err := ParseConnectData(e[:])
		if err != nil || d2.SubNQN() != d.SubNQN() || d2.HostNQN() != d.HostNQN() || d2.HostID() != d.HostID() || d2.CNTLID() != d.CNTLID() {
			t.Fatalf("round trip: %v", err)
		}
	})
}
