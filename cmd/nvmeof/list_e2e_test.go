package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestE2EListJSONNvmeCLI (issue 23.14): nvmeof list -o json had a schema
// of its own; tools written for nvme list -o json read "Devices". Now
// "Devices" is there in nvme-cli's form (the simple list, and -v's
// hosts/subsystems/namespaces/paths), our "controllers" beside it.
func TestE2EListJSONNvmeCLI(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	e.must("connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--loop")
	st := e.list()
	if len(st) != 1 || len(st[0].Namespaces) != 1 {
		t.Fatalf("controllers: %+v", st)
	}
	ns := st[0].Namespaces[0]

	var simple struct {
		Devices []map[string]any `json:"Devices"`
	}
	out := e.must("list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &simple); err != nil {
		t.Fatal(err)
	}
	if len(simple.Devices) != 1 {
		t.Fatalf("Devices: %s", out)
	}
	d := simple.Devices[0]
	// nvme-cli 2.x json_list_item_obj's keys, all of them.
	for _, k := range []string{"NameSpace", "DevicePath", "GenericPath", "Firmware", "ModelNumber", "SerialNumber", "UsedBytes", "MaximumLBA", "PhysicalSize", "SectorSize"} {
		if _, ok := d[k]; !ok {
			t.Errorf("Devices[0] lacks %s: %v", k, d)
		}
	}
	if d["DevicePath"] != ns.Loop || d["GenericPath"] != ns.File || d["NameSpace"] != float64(1) ||
		d["SectorSize"] != float64(ns.BlockSize) || d["PhysicalSize"] != float64(ns.Size) || d["MaximumLBA"] != float64(ns.Size/int64(ns.BlockSize)) ||
		d["SerialNumber"] != st[0].Serial || d["ModelNumber"] != st[0].Model {
		t.Errorf("Devices[0] = %v, controller %+v", d, st[0])
	}

	var verbose struct {
		Devices []struct {
			HostNQN    string
			Subsystems []struct {
				Subsystem, SubsystemNQN string
				Namespaces              []struct {
					NameSpace string
					NSID      uint32
					Paths     []struct{ Path, ANAState, Controller, Cntlid, Transport, Address string }
				}
			}
		}
	}
	out = e.must("list", "-v", "-o", "json")
	if err := json.Unmarshal([]byte(out), &verbose); err != nil {
		t.Fatal(err)
	}
	if len(verbose.Devices) != 1 || verbose.Devices[0].HostNQN != st[0].HostNQN || len(verbose.Devices[0].Subsystems) != 1 {
		t.Fatalf("list -v -o json: %s", out)
	}
	ss := verbose.Devices[0].Subsystems[0]
	if ss.Subsystem != "nvme-subsys0" || ss.SubsystemNQN != tg.NQN || len(ss.Namespaces) != 1 || ss.Namespaces[0].NameSpace != ns.Loop ||
		len(ss.Namespaces[0].Paths) != 1 || ss.Namespaces[0].Paths[0].ANAState != "optimized" || ss.Namespaces[0].Paths[0].Transport != "rdma" ||
		ss.Namespaces[0].Paths[0].Address != "traddr=127.0.0.1,trsvcid="+port {
		t.Errorf("list -v -o json: %s", out)
	}
	e.must("disconnect", "-d", "nvme0")
}
