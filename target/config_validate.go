package target

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// This file validates a configuration: Validate lists every problem with
// the path of its field; Warnings lists likely mistakes.

// FieldError is one invalid configuration value.
type FieldError struct {
	// Field is the path of the value, e.g. "subsystems[0].namespaces[1].nsid".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, if any (a *backend.ConfigError, an
	// nvmeof.ValidateNQN error, ...).
	Err error
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// ValidationError is every problem Validate found, in configuration order.
type ValidationError struct {
	Problems []*FieldError
}

// Error lists the problems, one per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.As finds a *FieldError.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// validator collects problems.
type validator struct {
	problems []*FieldError
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) addErr(field, reason string, err error) {
	v.problems = append(v.problems, &FieldError{Field: field, Reason: reason, Err: err})
}

// Validate checks the configuration as ApplyDefaults would complete it (c
// itself is not modified) and returns nil or a *ValidationError listing
// every problem, each naming the field path. It does not touch the file
// system or the network.
func (c *Config) Validate() error {
	d := c.Clone()
	d.ApplyDefaults()
	var v validator
	d.validateSubsystems(&v)
	d.validatePorts(&v)
	d.validateHosts(&v)
	d.Transport.validate(&v, "transport")
	d.Tuning.validate(&v, "tuning")
	d.Limits.validate(&v, "limits")
	d.Metrics.validate(&v, "metrics")
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

// nqnReason turns an nvmeof.ValidateNQN error into a reason.
func nqnReason(s string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "nvmeof: ")
	msg = strings.TrimSuffix(msg, ": "+nvmeof.ErrMalformed.Error())
	msg = strings.TrimPrefix(msg, "NQN ")
	msg = strings.TrimPrefix(msg, strconv.Quote(s))
	msg = strings.TrimPrefix(msg, ":")
	return fmt.Sprintf("%q is not a valid NQN: %s", s, strings.TrimSpace(msg))
}

// sizeReason turns a backend.ParseSize error into a reason.
func sizeReason(err error) string {
	return strings.TrimPrefix(err.Error(), "backend: size ")
}

// checkASCII checks an Identify string field.
func checkASCII(v *validator, field, s string, maxLen int) {
	if len(s) > maxLen {
		v.add(field, "%q is %d bytes long (at most %d)", s, len(s), maxLen)
		return
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			v.add(field, "%q has a byte that is not printable ASCII at offset %d", s, i)
			return
		}
	}
	if strings.TrimSpace(s) != s {
		v.add(field, "%q has leading or trailing spaces (Identify pads with spaces, so they would be lost)", s)
	}
}

func (c *Config) validateSubsystems(v *validator) {
	nqns := map[string]int{}
	ids := map[string]string{} // "nguid:..." → field that set it
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		sp := fmt.Sprintf("subsystems[%d]", i)
		switch {
		case s.NQN == "":
			v.add(sp+".nqn", "missing (every subsystem needs an NQN)")
		case nvmeof.IsDiscoveryNQN(s.NQN):
			v.add(sp+".nqn", "%q is the discovery NQN, which the target serves itself", s.NQN)
		default:
			if err := nvmeof.ValidateNQN(s.NQN); err != nil {
				v.addErr(sp+".nqn", nqnReason(s.NQN, err), err)
			} else if j, dup := nqns[s.NQN]; dup {
				v.add(sp+".nqn", "%q is also subsystems[%d].nqn", s.NQN, j)
			} else {
				nqns[s.NQN] = i
			}
		}
		checkASCII(v, sp+".serial", s.Serial, MaxSerialLen)
		checkASCII(v, sp+".model", s.Model, MaxModelLen)
		checkASCII(v, sp+".firmware_revision", s.FirmwareRevision, MaxFirmwareLen)
		if s.AllowAnyHost && len(s.AllowedHosts) > 0 {
			v.add(sp+".allowed_hosts", "has no effect when allow_any_host is true (remove one of them)")
		}
		hosts := map[string]int{}
		for j, h := range s.AllowedHosts {
			hp := fmt.Sprintf("%s.allowed_hosts[%d]", sp, j)
			if err := nvmeof.ValidateNQN(h); err != nil {
				v.addErr(hp, nqnReason(h, err), err)
				continue
			}
			if nvmeof.IsDiscoveryNQN(h) {
				v.add(hp, "%q is the discovery NQN, not a host NQN", h)
				continue
			}
			if k, dup := hosts[h]; dup {
				v.add(hp, "%q is also allowed_hosts[%d]", h, k)
				continue
			}
			hosts[h] = j
		}
		if s.MaxNamespaces > MaxNSID {
			v.add(sp+".max_namespaces", "%d is above the largest NSID %d", s.MaxNamespaces, uint32(MaxNSID))
		}
		if s.CNTLIDMin > DefaultCNTLIDMax {
			v.add(sp+".cntlid_min", "%d is above %d (0xFFF0..0xFFFF are reserved)", s.CNTLIDMin, DefaultCNTLIDMax)
		}
		if s.CNTLIDMax > DefaultCNTLIDMax {
			v.add(sp+".cntlid_max", "%d is above %d (0xFFF0..0xFFFF are reserved)", s.CNTLIDMax, DefaultCNTLIDMax)
		} else if s.CNTLIDMax < s.CNTLIDMin && s.CNTLIDMin <= DefaultCNTLIDMax {
			v.add(sp+".cntlid_max", "%d is below cntlid_min %d", s.CNTLIDMax, s.CNTLIDMin)
		}
		// Unique NSIDs up to max_namespaces also bound the namespace count.
		nsids := map[uint32]int{}
		for j := range s.Namespaces {
			n := &s.Namespaces[j]
			np := fmt.Sprintf("%s.namespaces[%d]", sp, j)
			switch {
			case n.NSID == 0 || n.NSID > MaxNSID:
				v.add(np+".nsid", "%d is reserved (must be 1..%d)", n.NSID, uint32(MaxNSID))
			case n.NSID > s.MaxNamespaces:
				v.add(np+".nsid", "%d is above the subsystem's max_namespaces %d (the largest NSID hosts accept; raise max_namespaces)", n.NSID, s.MaxNamespaces)
			default:
				if k, dup := nsids[n.NSID]; dup {
					v.add(np+".nsid", "%d is also %s.namespaces[%d].nsid", n.NSID, sp, k)
				} else {
					nsids[n.NSID] = j
				}
			}
			n.validate(v, np, ids)
			seenHosts := map[string]int{}
			for k, h := range n.Hosts {
				hp := fmt.Sprintf("%s.hosts[%d]", np, k)
				if err := nvmeof.ValidateNQN(h); err != nil {
					v.addErr(hp, nqnReason(h, err), err)
				} else if nvmeof.IsDiscoveryNQN(h) {
					v.add(hp, "%q is the discovery NQN, not a host NQN", h)
				} else if d, dup := seenHosts[h]; dup {
					v.add(hp, "%q is also hosts[%d]", h, d)
				} else {
					seenHosts[h] = k
				}
			}
		}
	}
}

// validate checks a namespace; ids maps identifiers already seen to the
// field that set them, for uniqueness across the whole configuration.
func (n *NamespaceConfig) validate(v *validator, np string, ids map[string]string) {
	bp := np + ".backend"
	bc, err := n.Backend.Config()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(bp+"."+fe.Field, fe.Reason, fe.Err)
		}
	} else if err := bc.Validate(); err != nil {
		var ce *backend.ConfigError
		if errors.As(err, &ce) {
			reason := ce.Reason
			if ce.Field == "kind" && bc.Kind == "" {
				// A bare `kind: null` in YAML is the null value, not "null".
				reason += `; write "null" in quotes for the null backend`
			}
			v.addErr(bp+"."+ce.Field, reason, err)
		} else {
			v.addErr(bp, err.Error(), err)
		}
	}
	ident, err := n.Identifiers()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(np+"."+fe.Field, fe.Reason, fe.Err)
		}
	} else {
		check := func(field, kind string, has bool, b []byte) {
			if !has {
				return
			}
			key := kind + ":" + hex.EncodeToString(b)
			if other, dup := ids[key]; dup {
				v.add(np+"."+field, "%s is also %s (namespace identifiers must be unique)", kind, other)
				return
			}
			ids[key] = np + "." + field
		}
		check("nguid", "nguid", ident.HasNGUID, ident.NGUID[:])
		check("uuid", "uuid", ident.HasUUID, ident.UUID[:])
		check("eui64", "eui64", ident.HasEUI64, ident.EUI64[:])
	}
	// An RBD image is one namespace (as a file is): two would be two
	// RADOS clients writing it. The backend's claim catches the same
	// image reached through another ceph.conf.
	if b := &n.Backend; b.Kind == string(backend.KindRBD) && b.Image != "" && n.IsEnabled() {
		conf := b.CephConf
		if conf == "" {
			conf = backend.DefaultCephConf
		}
		spec := b.Pool + "/" + b.Image
		if b.RADOSNamespace != "" {
			spec = b.Pool + "/" + b.RADOSNamespace + "/" + b.Image
		}
		key := "rbd-image:" + conf + "\x00" + spec
		if other, dup := ids[key]; dup {
			v.add(bp+".image", "%s is also the image of %s (an image can be one namespace only)", spec, other)
		} else {
			ids[key] = np
		}
	}
	if n.ANAGroup > MaxANAGroup {
		v.add(np+".ana_group", "%d is out of range (must be 1..%d)", n.ANAGroup, MaxANAGroup)
	}
	if n.IOWorkers < 0 || n.IOWorkers > 4096 {
		v.add(np+".io_workers", "%d is out of range (0 for the shared pool, or 1..4096)", n.IOWorkers)
	}
}

// parseIP parses a configured address, explaining what is wrong.
func parseIP(s string) (netip.Addr, string) {
	if s == "" {
		return netip.Addr{}, "missing (an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::)"
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
			return a, fmt.Sprintf("%q is not an IP address (give the port in service_id, and no brackets)", s)
		}
		if strings.Trim(s, "0123456789.") == "" {
			return a, fmt.Sprintf("%q is not an IP address", s)
		}
		return a, fmt.Sprintf("%q is not an IP address (host names are not resolved)", s)
	}
	if a.Is4In6() {
		return a, fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write it as %s", s, a.Unmap())
	}
	return a, ""
}

func (c *Config) validatePorts(v *validator) {
	ids := map[uint16]int{}
	type listen struct {
		fam  uint8
		addr netip.Addr
		svc  int
	}
	var listens []struct {
		l listen
		i int
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		pp := fmt.Sprintf("ports[%d]", i)
		if j, dup := ids[p.ID]; dup {
			v.add(pp+".id", "%d is also ports[%d].id", p.ID, j)
		} else {
			ids[p.ID] = i
		}
		addr, reason := parseIP(p.Address)
		if reason != "" {
			v.add(pp+".address", "%s", reason)
		}
		if p.ServiceID < 1 || p.ServiceID > 65535 {
			v.add(pp+".service_id", "%d is not a TCP port (1..65535)", p.ServiceID)
		}
		if reason == "" && p.ServiceID >= 1 && p.ServiceID <= 65535 {
			l := listen{fam: p.AdrFam(), addr: addr, svc: p.ServiceID}
			for _, o := range listens {
				if o.l.fam != l.fam || o.l.svc != l.svc {
					continue
				}
				if o.l.addr == l.addr {
					v.add(pp+".address", "%s is also the listen address of ports[%d]", p.ListenAddress(), o.i)
				} else if o.l.addr.IsUnspecified() || l.addr.IsUnspecified() {
					v.add(pp+".address", "%s overlaps ports[%d] at %s (a wildcard address takes the service ID on every address of its family)",
						p.ListenAddress(), o.i, c.Ports[o.i].ListenAddress())
				} else {
					continue
				}
				break
			}
			listens = append(listens, struct {
				l listen
				i int
			}{l, i})
		}
		switch {
		case p.InlineDataSize < 0 || p.InlineDataSize > MaxInlineDataSize:
			v.add(pp+".inline_data_size", "%d is out of range (1..%d; 0 for the default %d)", p.InlineDataSize, MaxInlineDataSize, DefaultInlineDataSize)
		case p.InlineDataSize%16 != 0:
			v.add(pp+".inline_data_size", "%d is not a multiple of 16 (IOCCSZ counts 16-byte units)", p.InlineDataSize)
		}
		if p.Transport != "" && p.Transport != TransportRDMA && p.Transport != TransportTCP {
			v.add(pp+".transport", "%q is not a transport (rdma or tcp)", p.Transport)
		}
		if p.MaxQueueSize < MinQueueSize || p.MaxQueueSize > MaxQueueSizeLimit {
			v.add(pp+".max_queue_size", "%d is out of range (%d..%d)", p.MaxQueueSize, MinQueueSize, MaxQueueSizeLimit)
		}
		served := map[string]int{}
		for j, nqn := range p.Subsystems {
			sp := fmt.Sprintf("%s.subsystems[%d]", pp, j)
			if k, dup := served[nqn]; dup {
				v.add(sp, "%q is also %s.subsystems[%d]", nqn, pp, k)
				continue
			}
			served[nqn] = j
			if c.Subsystem(nqn) == nil {
				if nvmeof.IsDiscoveryNQN(nqn) {
					v.add(sp, "%q is the discovery NQN, which every port serves; list only NVM subsystems", nqn)
				} else {
					v.add(sp, "%q is not the NQN of a configured subsystem", nqn)
				}
			}
		}
		refs := map[string]int{}
		seenANA := map[uint32]bool{}
		for j, g := range p.ANAGroups {
			gp := fmt.Sprintf("%s.ana_groups[%d]", pp, j)
			if g.ID < 1 || g.ID > MaxANAGroup {
				v.add(gp+".id", "%d is out of range (1..%d)", g.ID, MaxANAGroup)
			} else if seenANA[g.ID] {
				v.add(gp+".id", "ANA group %d is listed twice on the port", g.ID)
			}
			seenANA[g.ID] = true
			if _, err := ParseANAState(g.State); err != nil {
				v.addErr(gp+".state", fmt.Sprintf("%q is not an ANA state (optimized, non-optimized, inaccessible, persistent-loss, change)", g.State), err)
			}
		}
		for j := range p.Referrals {
			r := &p.Referrals[j]
			rp := fmt.Sprintf("%s.referrals[%d]", pp, j)
			a, reason := parseIP(r.Address)
			switch {
			case reason != "":
				v.add(rp+".address", "%s", reason)
			case a.IsUnspecified():
				v.add(rp+".address", "%q is a wildcard; a referral needs an address hosts can connect to", r.Address)
			}
			if r.ServiceID < 1 || r.ServiceID > 65535 {
				v.add(rp+".service_id", "%d is not a TCP port (1..65535)", r.ServiceID)
			}
			key := r.ListenAddress()
			if k, dup := refs[key]; dup {
				v.add(rp, "%s is also %s.referrals[%d]", key, pp, k)
			} else {
				refs[key] = j
			}
		}
	}
}

func (c *Config) validateHosts(v *validator) {
	seen := map[string]int{}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		hp := fmt.Sprintf("hosts[%d].nqn", i)
		if h.NQN == "" {
			v.add(hp, "missing")
			continue
		}
		if err := nvmeof.ValidateNQN(h.NQN); err != nil {
			v.addErr(hp, nqnReason(h.NQN, err), err)
			continue
		}
		if nvmeof.IsDiscoveryNQN(h.NQN) {
			v.add(hp, "%q is the discovery NQN, not a host NQN", h.NQN)
			continue
		}
		if j, dup := seen[h.NQN]; dup {
			v.add(hp, "%q is also hosts[%d].nqn", h.NQN, j)
			continue
		}
		seen[h.NQN] = i
		h.validateAuth(v, fmt.Sprintf("hosts[%d]", i))
	}
}

func (t *TransportConfig) validate(v *validator, tp string) {
	if _, err := t.RDMA(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(tp+"."+fe.Field, fe.Reason, fe.Err)
		}
	}
	if t.MaxFPDU != 0 && (t.MaxFPDU < 32 || t.MaxFPDU > 65528) {
		v.add(tp+".max_fpdu", "%d is out of range (32..65528, or 0 for the TCP MSS)", t.MaxFPDU)
	}
	for _, d := range []struct {
		name string
		val  time.Duration
	}{{"connect_timeout", t.ConnectTimeout}, {"stall_timeout", t.StallTimeout}, {"write_timeout", t.WriteTimeout}, {"busy_poll", t.BusyPoll}} {
		if d.val < 0 {
			v.add(tp+"."+d.name, "%s is negative", d.val)
		}
	}
	if t.BusyPoll > time.Second {
		v.add(tp+".busy_poll", "%s is longer than 1s (it is how long a receive loop spins before sleeping)", t.BusyPoll)
	}
}

func (l *LimitsConfig) validate(v *validator, tp string) {
	for _, f := range []struct {
		name     string
		val, max int
	}{
		{"max_pending", l.MaxPending, 1 << 20},
		{"max_pending_per_address", l.MaxPendingPerAddress, 1 << 20},
		{"max_connections", l.MaxConnections, 1 << 24},
		{"max_controllers_per_host", l.MaxControllersPerHost, 0xFFEF},
		{"max_queues_per_host", l.MaxQueuesPerHost, 1 << 24},
	} {
		if f.val < 1 || f.val > f.max {
			v.add(tp+"."+f.name, "%d is out of range (1..%d)", f.val, f.max)
		}
	}
}

func (u *TuningConfig) validate(v *validator, tp string) {
	if u.IOWorkers < 1 || u.IOWorkers > 65536 {
		v.add(tp+".io_workers", "%d is out of range (1..65536, or 0 for 8 per CPU)", u.IOWorkers)
	}
	mts, err := backend.ParseSize(u.MaxTransferSize)
	switch {
	case err != nil:
		v.addErr(tp+".max_transfer_size", sizeReason(err), err)
	case mts < pageSize || mts > maxTransferLimit || mts&(mts-1) != 0:
		mts = 0 // do not compare the buffer pool with it
		v.add(tp+".max_transfer_size", "%s is not a power of two from 4KiB to 8MiB (MDTS counts powers of two of 4 KiB pages)", u.MaxTransferSize)
	}
	bps, err := backend.ParseSize(u.BufferPoolSize)
	switch {
	case err != nil:
		v.addErr(tp+".buffer_pool_size", sizeReason(err), err)
	case bps%pageSize != 0 || bps <= 0:
		v.add(tp+".buffer_pool_size", "%s is not a positive multiple of 4KiB", u.BufferPoolSize)
	case mts > 0 && bps < mts:
		v.add(tp+".buffer_pool_size", "%s is smaller than max_transfer_size %s (a maximum-size command could never get a buffer)", u.BufferPoolSize, u.MaxTransferSize)
	case bps > 1<<30:
		v.add(tp+".buffer_pool_size", "%s is above 1GiB per queue", u.BufferPoolSize)
	}
	if u.MaxIOQueues < 1 || u.MaxIOQueues > 1024 {
		v.add(tp+".max_io_queues", "%d is out of range (1..1024, or 0 for the number of CPUs)", u.MaxIOQueues)
	}
	// KATO is a 32-bit count of milliseconds.
	const maxKATO = time.Duration(math.MaxUint32) * time.Millisecond
	for _, d := range []struct {
		name string
		val  time.Duration
	}{{"keep_alive", u.KeepAlive}, {"keep_alive_min", u.KeepAliveMin}, {"keep_alive_max", u.KeepAliveMax}} {
		switch {
		case d.val < time.Second:
			v.add(tp+"."+d.name, "%s is below 1s (nvmet rounds keep-alive timeouts up to whole seconds)", d.val)
		case d.val > maxKATO:
			v.add(tp+"."+d.name, "%s is above %s (KATO is 32-bit milliseconds)", d.val, maxKATO)
		}
	}
	if u.KeepAliveMin > u.KeepAliveMax {
		v.add(tp+".keep_alive_min", "%s is above keep_alive_max %s", u.KeepAliveMin, u.KeepAliveMax)
	} else if u.KeepAlive < u.KeepAliveMin || u.KeepAlive > u.KeepAliveMax {
		v.add(tp+".keep_alive", "%s is outside keep_alive_min..keep_alive_max (%s..%s)", u.KeepAlive, u.KeepAliveMin, u.KeepAliveMax)
	}
	if u.HealthInterval < time.Second {
		v.add(tp+".health_interval", "%s is below 1s (health reads may issue SMART commands to the device)", u.HealthInterval)
	}
}

// Warnings returns problems that do not make the configuration invalid but
// are probably mistakes: subsystems served on no port, ports that serve no
// subsystem, subsystems no host may connect to, and allow_any_host on a
// port reachable beyond the loopback interface. Call it on a valid
// configuration.
func (c *Config) Warnings() []string {
	var w []string
	served := map[string]bool{}
	for i := range c.Ports {
		p := &c.Ports[i]
		for _, nqn := range p.Subsystems {
			served[nqn] = true
		}
		if len(p.Subsystems) == 0 {
			w = append(w, fmt.Sprintf("ports[%d] (%s) serves no subsystem, only discovery", i, p.ListenAddress()))
		}
	}
	keyed := map[string]bool{}
	for i := range c.Hosts {
		if c.Hosts[i].DHCHAPKey != "" {
			keyed[c.Hosts[i].NQN] = true
		}
	}
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		if s.AuthRequired {
			for _, h := range s.AllowedHosts {
				if !keyed[h] {
					w = append(w, fmt.Sprintf("subsystems[%d] (%s) requires authentication but allowed host %s has no dhchap_key in hosts: it cannot connect", i, s.NQN, h))
				}
			}
		}
		if !served[s.NQN] {
			w = append(w, fmt.Sprintf("subsystems[%d] (%s) is served on no port", i, s.NQN))
		}
		if !s.AllowAnyHost && len(s.AllowedHosts) == 0 {
			w = append(w, fmt.Sprintf("subsystems[%d] (%s) allows no host (set allow_any_host or allowed_hosts)", i, s.NQN))
		}
		if s.AllowAnyHost {
			for j := range c.Ports {
				p := &c.Ports[j]
				a, err := netip.ParseAddr(p.Address)
				if err != nil || a.IsLoopback() {
					continue
				}
				for _, nqn := range p.Subsystems {
					if nqn == s.NQN {
						w = append(w, fmt.Sprintf("subsystems[%d] (%s) allows any host and is served on %s: every host that reaches it can read and write its namespaces", i, s.NQN, p.ListenAddress()))
					}
				}
			}
		}
	}
	return w
}
