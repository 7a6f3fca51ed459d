package nvmecli

import (
	"fmt"
	"io"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// ListSubsysJSON is nvme-cli's list-subsys -o json.
func ListSubsysJSON(sts []*hoststate.Controller) string {
	type host struct{ nqn, id string }
	var hosts []host
	byHost := map[host][]*hoststate.Controller{}
	for _, st := range sts {
		h := host{st.HostNQN, st.HostID}
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], st)
	}
	var objs []*Object
	for _, h := range hosts {
		o := NewObject().Add("HostNQN", h.nqn).Add("HostID", h.id)
		var subs []*Object
		for _, st := range byHost[h] {
			subs = append(subs, NewObject().Add("Name", "nvme-subsys"+strings.TrimPrefix(st.Device, "nvme")).
				Add("NQN", st.SubNQN).Add("Paths", []*Object{NewObject().Add("Name", st.Device).
				Add("Transport", st.Transport).Add("Address", pathAddress(st)).Add("State", st.State)}))
		}
		objs = append(objs, o.Add("Subsystems", subs))
	}
	return Array(objs...)
}

// pathAddress is a path's address as Linux shows it in sysfs.
func pathAddress(st *hoststate.Controller) string {
	host, port := st.Address, ""
	if i := strings.LastIndexByte(st.Address, ':'); i >= 0 {
		host, port = strings.Trim(st.Address[:i], "[]"), st.Address[i+1:]
	}
	return fmt.Sprintf("traddr=%s,trsvcid=%s", host, port)
}

// PrintListSubsys is nvme-cli's normal list-subsys output.
func PrintListSubsys(w io.Writer, sts []*hoststate.Controller) {
	for _, st := range sts {
		fmt.Fprintf(w, "nvme-subsys%s - NQN=%s\n", strings.TrimPrefix(st.Device, "nvme"), st.SubNQN)
		fmt.Fprintln(w, "\\")
		fmt.Fprintf(w, " +- %s %s %s %s\n", st.Device, st.Transport, pathAddress(st), st.State)
		fmt.Fprintln(w)
	}
}
