package nvmecli

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// nvme-cli's "nvme list -o json" (src/nvme-print-json.c json_simple_list,
// json_list_item_obj) and "nvme list -v -o json" (json_detail_list_v2,
// the multipath form) for our controllers, under nvme-cli's key "Devices";
// list -o json adds our own "controllers" beside it. DevicePath is the
// namespace's block device (its loop device) when it has one, else its
// FUSE device file; GenericPath is the FUSE file (the analog of
// /dev/ngXnY). UsedBytes is the namespace's size (NUSE is not kept).

// nvmeListItem is one namespace of nvme list's simple form.
type nvmeListItem struct {
	NameSpace    uint32 `json:"NameSpace"`
	DevicePath   string `json:"DevicePath"`
	GenericPath  string `json:"GenericPath"`
	Firmware     string `json:"Firmware"`
	ModelNumber  string `json:"ModelNumber"`
	SerialNumber string `json:"SerialNumber"`
	UsedBytes    uint64 `json:"UsedBytes"`
	MaximumLBA   uint64 `json:"MaximumLBA"`
	PhysicalSize uint64 `json:"PhysicalSize"`
	SectorSize   int    `json:"SectorSize"`
}

func nvmeListItems(all []*hoststate.Controller) []nvmeListItem {
	out := []nvmeListItem{}
	for _, st := range all {
		for _, n := range st.Namespaces {
			if n.Gone {
				continue
			}
			dev := n.File
			if n.Loop != "" {
				dev = n.Loop
			}
			out = append(out, nvmeListItem{NameSpace: n.NSID, DevicePath: dev, GenericPath: n.File, Firmware: st.Firmware,
				ModelNumber: st.Model, SerialNumber: st.Serial, UsedBytes: uint64(n.Size), MaximumLBA: lbaCount(n),
				PhysicalSize: uint64(n.Size), SectorSize: n.BlockSize})
		}
	}
	return out
}

func lbaCount(n hoststate.Namespace) uint64 {
	if n.BlockSize <= 0 {
		return 0
	}
	return uint64(n.Size) / uint64(n.BlockSize)
}

// nvmeListHost is one host of nvme list -v's form.
type nvmeListHost struct {
	HostNQN    string              `json:"HostNQN"`
	HostID     string              `json:"HostID,omitempty"`
	Subsystems []nvmeListSubsystem `json:"Subsystems"`
}

type nvmeListSubsystem struct {
	Subsystem    string              `json:"Subsystem"`
	SubsystemNQN string              `json:"SubsystemNQN"`
	Namespaces   []nvmeListNamespace `json:"Namespaces"`
}

type nvmeListNamespace struct {
	NameSpace    string         `json:"NameSpace"`
	Generic      string         `json:"Generic"`
	NSID         uint32         `json:"NSID"`
	UsedBytes    uint64         `json:"UsedBytes"`
	MaximumLBA   uint64         `json:"MaximumLBA"`
	PhysicalSize uint64         `json:"PhysicalSize"`
	SectorSize   int            `json:"SectorSize"`
	Paths        []nvmeListPath `json:"Paths"`
}

type nvmeListPath struct {
	Path         string `json:"Path"`
	ANAState     string `json:"ANAState"`
	Controller   string `json:"Controller"`
	Cntlid       string `json:"Cntlid"`
	SerialNumber string `json:"SerialNumber"`
	ModelNumber  string `json:"ModelNumber"`
	Firmware     string `json:"Firmware"`
	Transport    string `json:"Transport"`
	Address      string `json:"Address"`
	Slot         string `json:"Slot"`
}

// fabricsAddress is a controller's address as the kernel's sysfs gives it
// ("traddr=10.0.0.5,trsvcid=4420").
func fabricsAddress(hostport string) string {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return "traddr=" + h + ",trsvcid=" + p
}

func nvmeListDetail(all []*hoststate.Controller) []nvmeListHost {
	var hosts []nvmeListHost
	idx := map[string]int{}
	for _, st := range all {
		i, ok := idx[st.HostNQN]
		if !ok {
			i = len(hosts)
			idx[st.HostNQN] = i
			hosts = append(hosts, nvmeListHost{HostNQN: st.HostNQN, HostID: st.HostID, Subsystems: []nvmeListSubsystem{}})
		}
		ss := nvmeListSubsystem{Subsystem: "nvme-subsys" + strings.TrimPrefix(st.Device, "nvme"), SubsystemNQN: st.SubNQN, Namespaces: []nvmeListNamespace{}}
		paths := st.Paths
		if len(paths) == 0 {
			paths = []hoststate.Path{{Address: st.Address, Transport: st.Transport, CNTLID: st.CNTLID, State: st.State}}
		}
		for _, n := range st.Namespaces {
			if n.Gone {
				continue
			}
			dev := n.File
			if n.Loop != "" {
				dev = n.Loop
			}
			ns := nvmeListNamespace{NameSpace: dev, Generic: n.File, NSID: n.NSID, UsedBytes: uint64(n.Size), MaximumLBA: lbaCount(n),
				PhysicalSize: uint64(n.Size), SectorSize: n.BlockSize, Paths: []nvmeListPath{}}
			for pi, p := range paths {
				ana := ""
				for _, a := range p.ANA {
					if a.NSID == n.NSID {
						ana = a.State
					}
				}
				ns.Paths = append(ns.Paths, nvmeListPath{Path: fmt.Sprintf("%sc%dn%d", st.Device, pi, n.NSID), ANAState: ana,
					Controller: fmt.Sprintf("%sc%d", st.Device, pi), Cntlid: strconv.Itoa(int(p.CNTLID)), SerialNumber: st.Serial,
					ModelNumber: st.Model, Firmware: st.Firmware, Transport: cmp.Or(p.Transport, "rdma"), Address: fabricsAddress(p.Address)})
			}
			ss.Namespaces = append(ss.Namespaces, ns)
		}
		hosts[i].Subsystems = append(hosts[i].Subsystems, ss)
	}
	if hosts == nil {
		hosts = []nvmeListHost{}
	}
	return hosts
}
