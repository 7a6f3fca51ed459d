package connd

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

func TestConnectOptsRoundTrip(t *testing.T) {
	o := Options{Fabrics: FabricsOptions{Transport: "rdma", Traddr: "10.0.0.1", Trsvcid: "4421", NQN: "nqn.2024-01.x:y",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000aa", NrIOQueues: 3, QueueSize: 64,
		KeepAliveTmo: 7, ReconnectDelay: 2, CtrlLossTmo: -1, CRC: "required", MaxFPDU: 1448, ConnectTimeout: time.Second, BusyPoll: 50 * time.Microsecond},
		Mount: "/mnt/x", Loop: true, MountNSID: 2, FSType: "xfs", MKFS: true, MountOpts: "noatime", LoopDirectIO: true, FUSEDirectIO: false}
	if got := o.toJSON().opts(); !reflect.DeepEqual(got, o) {
		t.Fatalf("round trip:\n%+v\n%+v", got, o)
	}
	// Options' own JSON is the daemon's (--config, add-path).
	b, err := json.Marshal(o)
	want, _ := json.Marshal(o.toJSON())
	var back Options
	if err != nil || string(b) != string(want) || json.Unmarshal(b, &back) != nil || !reflect.DeepEqual(back, o) {
		t.Fatalf("Options JSON %s (%v), want %s; back %+v", b, err, want, back)
	}
	cfg, err := o.Fabrics.Config(o.Fabrics.NQN, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Address != "10.0.0.1:4421" || cfg.CtrlLossTimeout >= 0 || cfg.KeepAliveTimeout != 7*time.Second ||
		cfg.HostID != [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0, 0xaa} || cfg.Transport.MaxFPDU != 1448 ||
		cfg.Transport.BusyPoll != 50*time.Microsecond {
		t.Fatalf("config %+v", cfg)
	}
	o.Fabrics.BusyPoll = 2 * time.Second
	if _, err := o.Fabrics.Config(o.Fabrics.NQN, nil); err == nil || !strings.Contains(err.Error(), "--busy-poll") {
		t.Fatalf("busy-poll 2s: %v", err)
	}
	o.Fabrics.BusyPoll = 0
	o.Fabrics.CtrlLossTmo = 0
	if cfg, _ := o.Fabrics.Config(o.Fabrics.NQN, nil); !cfg.NoReconnect {
		t.Fatal("ctrl-loss-tmo 0 should mean no reconnect")
	}
	o.Fabrics.Transport, o.Fabrics.HdrDigest = "tcp", true
	if cfg, err := o.Fabrics.Config(o.Fabrics.NQN, nil); err != nil || cfg.TrType != nvmeof.TrTypeTCP || !cfg.TCPTransport.Digests.Header || cfg.TCPTransport.Digests.Data {
		t.Fatalf("tcp transport with a header digest: %+v %v", cfg.TCPTransport, err)
	}
	if j := o.toJSON(); j.opts().Fabrics != o.Fabrics {
		t.Fatal("the digests do not survive the round trip to the daemon")
	}
	o.Fabrics.Transport = "fc"
	if _, err := o.Fabrics.Config(o.Fabrics.NQN, nil); err == nil {
		t.Fatal("fc transport accepted")
	}
}
