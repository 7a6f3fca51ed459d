package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/nvmecli"
)

// listSubsysJSON is nvme-cli's list-subsys -o json.
func listSubsysJSON(sts []*ctrlState) string {
	type host struct{ nqn, id string }
	var hosts []host
	byHost := map[host][]*ctrlState{}
	for _, st := range sts {
		h := host{st.HostNQN, st.HostID}
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], st)
	}
	var objs []*nvmecli.Object
	for _, h := range hosts {
		o := nvmecli.NewObject().Add("HostNQN", h.nqn).Add("HostID", h.id)
		var subs []*nvmecli.Object
		for _, st := range byHost[h] {
			subs = append(subs, nvmecli.NewObject().Add("Name", "nvme-subsys"+strings.TrimPrefix(st.Device, "nvme")).
				Add("NQN", st.SubNQN).Add("Paths", []*nvmecli.Object{nvmecli.NewObject().Add("Name", st.Device).
				Add("Transport", st.Transport).Add("Address", pathAddress(st)).Add("State", st.State)}))
		}
		objs = append(objs, o.Add("Subsystems", subs))
	}
	return nvmecli.Array(objs...)
}

// pathAddress is a path's address as Linux shows it in sysfs.
func pathAddress(st *ctrlState) string {
	host, port := st.Address, ""
	if i := strings.LastIndexByte(st.Address, ':'); i >= 0 {
		host, port = strings.Trim(st.Address[:i], "[]"), st.Address[i+1:]
	}
	return fmt.Sprintf("traddr=%s,trsvcid=%s", host, port)
}

// printListSubsys is nvme-cli's normal list-subsys output.
func printListSubsys(w io.Writer, sts []*ctrlState) {
	for _, st := range sts {
		fmt.Fprintf(w, "nvme-subsys%s - NQN=%s\n", strings.TrimPrefix(st.Device, "nvme"), st.SubNQN)
		fmt.Fprintln(w, "\\")
		fmt.Fprintf(w, " +- %s %s %s %s\n", st.Device, st.Transport, pathAddress(st), st.State)
		fmt.Fprintln(w)
	}
}
