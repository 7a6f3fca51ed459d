package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/initiator/connd"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// TestE2EAdminCommands runs nvme-cli's query commands on a controller
// connected to a local nvmetd and checks what they print against the
// target's configuration; the same commands' output is compared with the
// kernel's nvme-cli in test/interop (TestLinux/<kernel>/AdminCommands).
func TestE2EAdminCommands(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	e.must("connect", "-t", "rdma", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN)

	var ctrl map[string]any
	if err := json.Unmarshal([]byte(e.must("id-ctrl", "-d", "nvme0", "-o", "json")), &ctrl); err != nil {
		t.Fatal(err)
	}
	if ctrl["subnqn"] != tg.NQN || ctrl["cntlid"] == nil || ctrl["psds"] == nil {
		t.Fatalf("id-ctrl json: subnqn %v, cntlid %v", ctrl["subnqn"], ctrl["cntlid"])
	}
	if out := e.must("id-ctrl", "/dev/nvme0"); !strings.HasPrefix(out, "NVME Identify Controller:\nvid       : ") ||
		!strings.Contains(out, "subnqn    : "+tg.NQN+"\n") {
		t.Fatalf("id-ctrl:\n%s", out)
	}
	if out := e.must("id-ctrl", "-d", "nvme0", "-b"); len(out) != 4096 {
		t.Fatalf("id-ctrl -b: %d bytes", len(out))
	}

	var ns struct {
		NSZE  uint64 `json:"nsze"`
		FLBAS int    `json:"flbas"`
		LBAFs []struct {
			DS int `json:"ds"`
		} `json:"lbafs"`
	}
	if err := json.Unmarshal([]byte(e.must("id-ns", "-d", "nvme0", "-n", "1", "-o", "json")), &ns); err != nil {
		t.Fatal(err)
	}
	if len(ns.LBAFs) == 0 || ns.NSZE<<ns.LBAFs[ns.FLBAS&0xf].DS != 64<<20 {
		t.Fatalf("id-ns: %+v, want 64 MiB", ns)
	}
	if out := e.must("id-ns", "nvme0n1"); !strings.Contains(out, "NVME Identify Namespace 1:\nnsze    : 0x") {
		t.Fatalf("id-ns:\n%s", out)
	}

	for _, c := range [][]string{
		{"smart-log", "-d", "nvme0", "-o", "json"},
		{"error-log", "-d", "nvme0", "-o", "json"},
		{"fw-log", "-d", "nvme0", "-o", "json"},
		{"effects-log", "-d", "nvme0", "-o", "json"},
		{"ana-log", "-d", "nvme0", "-o", "json"},
	} {
		var v any
		out := e.must(c...)
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: %v\n%s", c[0], err, out)
		}
		if v == nil {
			t.Fatalf("%s: empty", c[0])
		}
	}
	var eff []map[string]map[string]uint64
	_ = json.Unmarshal([]byte(e.must("effects-log", "-d", "nvme0", "-o", "json")), &eff)
	if len(eff) != 1 || eff[0]["admin_cmd_set"]["ACS_6 (Identify)"]&1 == 0 || eff[0]["io_cmd_set"]["IOCS_2 (Read)"]&1 == 0 {
		t.Fatalf("effects-log: %v", eff)
	}
	if out := e.must("get-feature", "-d", "nvme0", "-f", "7"); !strings.HasPrefix(out, "get-feature:0x07 (Number of Queues), Current value:") {
		t.Fatalf("get-feature:\n%s", out)
	}
	// Issue 23 item 14: -o json printed the text. nvme-cli 2.x's layout:
	// one object, "feature: 0xNN" (name, value under the select's name) and
	// "Feature: 0xNN" (the decoded fields).
	var feat map[string][]map[string]any
	if out := e.must("get-feature", "-d", "nvme0", "-f", "7", "-o", "json"); json.Unmarshal([]byte(out), &feat) != nil ||
		len(feat["feature: 0x07"]) != 1 || feat["feature: 0x07"][0]["name"] != "Number of Queues" ||
		!strings.HasPrefix(fmt.Sprint(feat["feature: 0x07"][0]["Current"]), "0x") ||
		len(feat["Feature: 0x07"]) != 1 || feat["Feature: 0x07"][0]["Number of IO Submission Queues Allocated (NSQA)"] == nil {
		t.Fatalf("get-feature -o json:\n%s", out)
	}
	var all map[string]any
	if out := e.must("get-feature", "-d", "nvme0", "-o", "json"); json.Unmarshal([]byte(out), &all) != nil || all["feature: 0x07"] == nil || all["feature: 0x0f"] == nil {
		t.Fatalf("get-feature -o json (all features):\n%s", out)
	}
	if out := e.must("get-log", "-d", "nvme0", "-i", "2", "-l", "512"); !strings.HasPrefix(out, "Device:nvme0 log-id:2 namespace-id:0xffffffff\n") {
		t.Fatalf("get-log:\n%s", out)
	}
	if out := e.must("get-log", "-d", "nvme0", "-i", "2", "-l", "512", "-b"); len(out) != 512 {
		t.Fatalf("get-log -b: %d bytes", len(out))
	}
	if out := e.must("list-subsys"); !strings.Contains(out, "NQN="+tg.NQN) || !strings.Contains(out, " +- nvme0 rdma traddr=127.0.0.1,trsvcid="+port+" live") {
		t.Fatalf("list-subsys:\n%s", out)
	}

	// The daemon refuses anything but the read-only admin commands, and
	// data lengths out of bounds.
	for _, bad := range []connd.AdminCommand{
		{Opcode: 0x09, CDW10: 7, DataLen: 0},           // Set Features
		{Opcode: 0x80, DataLen: 0},                     // Format NVM
		{Opcode: 0x06, CDW10: 1, DataLen: 8192},        // Identify, wrong length
		{Opcode: 0x02, CDW10: 2, DataLen: 1 << 20},     // over the bound
		{Opcode: 0x02, CDW10: 2 | 127<<16, DataLen: 4}, // NUMD disagrees
	} {
		if _, _, err := connd.Admin(hoststate.Store{Dir: e.state}, "nvme0", bad); err == nil || !strings.Contains(err.Error(), "admin:") {
			t.Errorf("admin %+v: %v, want a refusal", bad, err)
		}
	}
	// A command the controller fails prints nvme-cli's status line.
	if out, err := e.run("id-ns", "-d", "nvme0", "-n", "4294967295"); err == nil || !strings.Contains(err.Error(), "NVMe status: ") {
		t.Errorf("id-ns of the broadcast NSID: %v\n%s", err, out)
	}
	e.must("disconnect-all")
}

// TestE2EAutoconnect connects what a discovery.conf and a config.json
// name, and runs again without connecting twice.
func TestE2EAutoconnect(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	disc := filepath.Join(e.dir, "discovery.conf")
	cfg := filepath.Join(e.dir, "config.json")
	if err := os.WriteFile(disc, []byte(fmt.Sprintf("# test\n-t fc -a 127.0.0.1 -s 8009\n--transport=rdma --traddr=127.0.0.1 --trsvcid=%s --hdr-digest\n", port)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`[{"subsystems":[{"nqn":%q,"ports":[{"transport":"rdma","traddr":"127.0.0.1","trsvcid":%q,"nr_io_queues":2}]}]}]`, tg.NQN, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.must("autoconnect", "--discovery-conf", disc, "--config", cfg, "--dry-run")
	want := fmt.Sprintf("nvmeof connect --transport=rdma --traddr=127.0.0.1 --trsvcid=%s --nqn=%s --nr-io-queues=2\n"+
		"nvmeof connect-all --transport=rdma --traddr=127.0.0.1 --trsvcid=%s\n", port, tg.NQN, port)
	if out != want {
		t.Fatalf("dry run:\n%s\nwant:\n%s", out, want)
	}
	e.must("autoconnect", "--discovery-conf", disc, "--config", cfg)
	if l := e.list(); len(l) != 1 || l[0].SubNQN != tg.NQN || l[0].IOQueues != 2 {
		t.Fatalf("list after autoconnect: %+v", l)
	}
	e.must("autoconnect", "--discovery-conf", disc, "--config", cfg)
	if l := e.list(); len(l) != 1 {
		t.Fatalf("second autoconnect connected again: %+v", l)
	}
	e.must("disconnect-all")
}
