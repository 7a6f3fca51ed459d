package target

import (
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// handleAdmin serves a command on a connected admin queue. The commands and
// their statuses follow nvmet (drivers/nvme/target/admin-cmd.c,
// discovery.c, fabrics-cmd.c); everything here is quick and runs on the
// engine goroutine.
func (c *controller) handleAdmin(q *queue, r request) {
	sqe := r.SQE()
	if sqe.IsFabrics() {
		c.handleFabrics(q, r)
		return
	}
	// nvmet_check_ctrl_status: commands other than Fabrics ones need an
	// enabled, ready controller.
	if !c.ready() {
		q.respond(r, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)
		return
	}
	if !q.authorized() {
		// nvmet_check_ctrl_status: "qid 0 not authenticated".
		q.respond(r, nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
		return
	}
	op := sqe.Opcode()
	// Commands without data must not carry any (nvmet_check_transfer_len).
	// (Set Features may carry any: nvmet_check_data_len_lte(req, 0).)
	switch op {
	case nvmeof.AdminAbort, nvmeof.AdminAsyncEvent, nvmeof.AdminKeepAlive:
		if len(r.Data()) != 0 {
			q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			return
		}
	}
	switch op {
	case nvmeof.AdminGetLogPage:
		c.getLogPage(q, r)
	case nvmeof.AdminIdentify:
		c.identify(q, r)
	case nvmeof.AdminSetFeatures:
		c.setFeatures(q, r)
	case nvmeof.AdminGetFeatures:
		c.getFeatures(q, r)
	case nvmeof.AdminAsyncEvent:
		c.asyncEventRequest(q, r)
	case nvmeof.AdminKeepAlive:
		if !c.ka.enabled() {
			// nvmet_execute_keep_alive: no timer to restart.
			q.respond(r, nvmeof.StatusKeepAliveInvalid)
			return
		}
		c.ka.reset()
		q.respond(r, nvmeof.StatusSuccess)
	case nvmeof.AdminAbort:
		if c.sub.disc {
			q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
			return
		}
		// nvmet: a "minimum viable" Abort that aborts nothing.
		r.SetResult(nvmeof.AbortNotAborted)
		q.respond(r, nvmeof.StatusSuccess)
	default:
		q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
	}
}

// handleFabrics serves Property Get, Property Set and the authentication
// commands on the admin queue. Connect on a connected queue and anything
// else are unknown capsule types (nvmet_parse_fabrics_admin_cmd).
func (c *controller) handleFabrics(q *queue, r request) {
	sqe := r.SQE()
	switch sqe.FCType() {
	case nvmeof.FCTypePropertyGet:
		if len(r.Data()) != 0 {
			q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			return
		}
		pg := sqe.PropertyGetCmd()
		v, st := c.propertyGet(pg.Attrib()&1 != 0, pg.Offset())
		r.SetResult64(v)
		q.respond(r, st)
	case nvmeof.FCTypePropertySet:
		if len(r.Data()) != 0 {
			q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			return
		}
		ps := sqe.PropertySetCmd()
		q.respond(r, c.propertySet(ps.Attrib()&1 != 0, ps.Offset(), ps.Value()))
	case nvmeof.FCTypeAuthSend, nvmeof.FCTypeAuthReceive:
		q.handleAuth(c, r)
	default:
		q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
	}
}

// identify serves Identify. The data is always 4096 bytes.
func (c *controller) identify(q *queue, r request) {
	d := r.Data()
	if len(d) != nvmeof.IdentifyDataSize {
		q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
		return
	}
	clear(d)
	cmd := r.SQE().IdentifyCmd()
	nsid := r.SQE().NSID()
	if c.sub.disc {
		if cmd.CNS() != nvmeof.CNSController {
			q.respond(r, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
			return
		}
		c.identifyController((*nvmeof.IdentifyController)(d), q)
		q.respond(r, nvmeof.StatusSuccess)
		return
	}
	tab := c.sub.ns.Load()
	st := nvmeof.StatusSuccess
	switch cmd.CNS() {
	case nvmeof.CNSNamespace:
		// An inactive NSID gets zeroes; the broadcast NSID is invalid.
		if nsid == nvmeof.NSIDAll {
			st = nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
			break
		}
		if ns := tab.byID[nsid]; ns != nil && ns.online() && ns.visibleTo(c.hostNQN) {
			ns.identify((*nvmeof.IdentifyNamespace)(d))
		}
	case nvmeof.CNSController:
		c.identifyController((*nvmeof.IdentifyController)(d), q)
	case nvmeof.CNSActiveNSList, nvmeof.CNSCSActiveNSList:
		if nsid >= nvmeof.NSIDAll-1 {
			st = nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
			break
		}
		if cmd.CNS() == nvmeof.CNSCSActiveNSList && cmd.CSI() != nvmeof.CSINVM {
			break // no namespace of another command set: an empty list
		}
		nvmeof.EncodeNSList(d, c.activeNS(tab), nsid)
	case nvmeof.CNSNSDescList:
		ns, lst := c.lookupNS(tab, nsid)
		if lst != nvmeof.StatusSuccess {
			st = lst
			break
		}
		if _, err := nvmeof.EncodeNSDescriptors(d, ns.ids); err != nil {
			st = nvmeof.StatusInternalError | nvmeof.StatusDNR
		}
		ns.put()
	case nvmeof.CNSCSNamespace:
		ns, lst := c.lookupNS(tab, nsid)
		if lst != nvmeof.StatusSuccess {
			st = lst
			break
		}
		ns.put()
		if cmd.CSI() != nvmeof.CSINVM {
			st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
		}
		// NVM command set specific data: no protection information, no
		// extended formats: zeroes.
	case nvmeof.CNSCSController:
		if cmd.CSI() != nvmeof.CSINVM {
			st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
		}
		// nvmet answers zeroes: no NVM command set limits.
	case nvmeof.CNSNSIndependent:
		ns, lst := c.lookupNS(tab, nsid)
		if lst != nvmeof.StatusSuccess {
			st = lst
			break
		}
		ns.identifyIndependent((*nvmeof.IdentifyNSIndependent)(d))
		ns.put()
	default:
		st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	q.respond(r, st)
}

// identifyController fills Identify Controller (protocol.md §8.7, §10.2;
// nvmet_execute_identify_ctrl and nvmet_execute_identify_disc_ctrl).
func (c *controller) identifyController(id *nvmeof.IdentifyController, q *queue) {
	cfg := c.sub.cfg.Load()
	id.SetCNTLID(c.cntlid)
	id.SetVER(versionReported)
	id.SetSUBNQN(c.sub.nqn)
	id.SetMAXCMD(uint16(c.maxQueue))
	id.SetKAS(nvmeof.NvmetKAS) // 100 ms units; the timer works in seconds
	// Keyed SGLs (the Linux RDMA host requires them) and in-capsule data.
	sgls := uint32(nvmeof.SGLSSupported | nvmeof.SGLSKeyed)
	if c.inline > 0 {
		sgls |= nvmeof.SGLSOffset
	}
	id.SetSGLS(sgls)
	id.SetLPA(nvmeof.LPAExtendedData)
	oaes, _ := c.supportedAEC()
	id.SetOAES(oaes)
	// Traffic based keep alive: every command restarts the timer (see
	// keepAlive), so the host may skip Keep Alive while I/O flows.
	id.SetCTRATT(nvmeof.CTRATTHostID128 | nvmeof.CTRATTTBKAS)
	id.SetICDOFF(nvmeof.ICDOFF)
	id.SetMSDBD(nvmeof.MSDBD)
	if c.sub.disc {
		id.SetCNTRLTYPE(nvmeof.CntrlTypeDiscovery)
		id.SetFR(c.s.firmware)
		return
	}
	id.SetCNTRLTYPE(nvmeof.CntrlTypeIO)
	id.SetSN(cfg.Serial)
	id.SetMN(cfg.Model)
	id.SetFR(cfg.FirmwareRevision)
	id.SetRAB(6)
	// Several ports, several controllers, ANA reporting (nvmet with
	// CONFIG_NVME_TARGET... ANA, as always since Linux 5.0).
	id.SetCMIC(nvmeof.CMICMultiPort | nvmeof.CMICMultiCtrl | nvmeof.CMICANA)
	id.SetANATT(anaTransitionTime)
	id.SetANACAP(anaCapabilities)
	id.SetANAGRPMAX(MaxANAGroup)
	id.SetNANAGRPID(MaxANAGroup)
	id.SetMDTS(c.mdts)
	id.SetACL(3)
	id.SetAERL(maxAERs - 1)
	id.SetFRMW(1<<0 | 1<<1) // slot 1 read-only, one slot
	// SMART per namespace, the commands supported and effects log (which
	// the host then reads), extended Get Log Page data.
	id.SetLPA(nvmeof.LPASMARTPerNS | nvmeof.LPACommandEffects | nvmeof.LPAExtendedData)
	id.SetELPE(errorLogSlots - 1)
	id.SetSQES(0x66)
	id.SetCQES(0x44)
	id.SetNN(cfg.MaxNamespaces)
	id.SetMNAN(cfg.MaxNamespaces)
	// Dataset Management and Write Zeroes; no Timestamp (which would make
	// the host set the feature), no reservations.
	id.SetONCS(nvmeof.ONCSDSM | nvmeof.ONCSWriteZeroes)
	id.SetVWC(nvmeof.VWCPresent | nvmeof.VWCFlushNSIDAllSupported)
	id.SetIOCCSZ(nvmeof.IOCCSZ(c.inline))
	id.SetIORCSZ(nvmeof.IORCSZ)
	// nvmet's fake power state 0 (the values QEMU reports).
	ps := id.PSD(0)
	ps.SetMP(0x9C4)
	ps.SetENLAT(0x10)
	ps.SetEXLAT(0x4)
}

// identify fills Identify Namespace (NVM command set; nvmet_execute_
// identify_ns).
func (ns *namespace) identify(id *nvmeof.IdentifyNamespace) {
	nsze := ns.nsze.Load()
	id.SetNSZE(nsze)
	id.SetNCAP(nsze) // must not be 0 (protocol.md §12.9)
	id.SetNUSE(nsze)
	var feat uint8
	if ns.info.Discard {
		feat |= nvmeof.NSFEATThin
	}
	bs := uint32(1) << ns.lbaShift
	if pb := ns.info.PhysicalBlockSize; pb > bs && pb%bs == 0 {
		feat |= nvmeof.NSFEATOptimalIO
		id.SetNPWG(uint16(pb/bs - 1))
		id.SetNPWA(uint16(pb/bs - 1))
		id.SetNPDG(uint16(pb/bs - 1))
		id.SetNPDA(uint16(pb/bs - 1))
		if ob := ns.info.OptimalIOSize; ob > 0 && ob%bs == 0 && ob/bs <= 1<<16 {
			id.SetNOWS(uint16(ob/bs - 1))
		}
	}
	id.SetNSFEAT(feat)
	// Write Zeroes always reads back zeroes and honours DEAC; deallocated
	// (discarded) blocks read as zeroes only where the backend says so.
	dl := uint8(nvmeof.DLFEATWriteZeroesDeac)
	if ns.info.Discard && ns.info.DiscardZeroes {
		dl |= nvmeof.DLFEATReadZeroes
	}
	id.SetDLFEAT(dl)
	id.SetNLBAF(0)
	id.SetFLBAS(0)
	id.SetLBAF(0, nvmeof.LBAFormat{LBADS: ns.lbaShift})
	id.SetNMIC(nvmeof.NMICShared)
	id.SetANAGRPID(ns.cfg.ANAGroup)
	if ns.readOnly {
		id.SetNSATTR(nvmeof.NSATTRWriteProtected)
	}
	id.SetNGUID(ns.ids.NGUID)
	id.SetEUI64(ns.ids.EUI64)
}

// identifyIndependent fills the I/O command set independent Identify
// Namespace (CNS 8; nvmet_execute_id_cs_indep): ready, shared.
func (ns *namespace) identifyIndependent(id *nvmeof.IdentifyNSIndependent) {
	id.SetNSTAT(nvmeof.NSTATReady)
	id.SetNMIC(nvmeof.NMICShared)
	if ns.readOnly {
		id.SetNSATTR(nvmeof.NSATTRWriteProtected)
	}
	if ns.info.Rotational {
		id.SetNSFEAT(1 << 4) // NVME_NS_ROTATIONAL
	}
}

// Features.

// setFeatures serves Set Features (nvmet_execute_set_features,
// nvmet_execute_disc_set_features).
func (c *controller) setFeatures(q *queue, r request) {
	cmd := r.SQE().FeaturesCmd()
	v := cmd.Value()
	st := nvmeof.StatusSuccess
	switch fid := cmd.FID(); {
	case fid == nvmeof.FeatKeepAliveTimer:
		d := c.s.keepAliveTimeout(v, c.sub.disc)
		c.ka.set(d)
		r.SetResult(uint32(d / time.Millisecond))
		c.log.Debug("keep-alive timeout set", zap.Duration("kato", d), zap.Uint32("requested_ms", v))
	case fid == nvmeof.FeatAsyncEventConfig:
		_, aec := c.supportedAEC()
		if v&^aec != 0 {
			st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
			break
		}
		c.mu.Lock()
		c.aenEnable = v
		c.mu.Unlock()
		r.SetResult(v)
	case fid == nvmeof.FeatNumQueues && !c.sub.disc:
		nsq, ncq := nvmeof.DecodeNumQueues(v)
		if nsq > 0xFFFF || ncq > 0xFFFF {
			st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
			break
		}
		c.mu.Lock()
		if c.ioQueues > 0 {
			// NVMe Base 2.0 §5.27.1.7: not after I/O queues exist.
			c.mu.Unlock()
			st = nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR
			break
		}
		limit := len(c.queues) - 1
		n := min(max(nsq, ncq), limit)
		c.maxQID, c.nqSet = n, true
		c.mu.Unlock()
		r.SetResult(nvmeof.EncodeNumQueues(n, n))
	case fid == nvmeof.FeatHostIdentifier && !c.sub.disc:
		// nvmet: the host identifier comes with Connect on fabrics.
		st = nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR
	default:
		st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	q.respond(r, st)
}

// getFeatures serves Get Features (nvmet_execute_get_features,
// nvmet_execute_disc_get_features).
func (c *controller) getFeatures(q *queue, r request) {
	cmd := r.SQE().FeaturesCmd()
	fid := cmd.FID()
	want := 0
	if fid == nvmeof.FeatHostIdentifier && !c.sub.disc {
		want = 16
	}
	if len(r.Data()) != want {
		q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
		return
	}
	st := nvmeof.StatusSuccess
	switch {
	case fid == nvmeof.FeatKeepAliveTimer:
		r.SetResult(uint32(c.ka.get() / time.Millisecond))
	case fid == nvmeof.FeatAsyncEventConfig:
		c.mu.Lock()
		r.SetResult(c.aenEnable)
		c.mu.Unlock()
	case fid == nvmeof.FeatNumQueues && !c.sub.disc:
		c.mu.Lock()
		n := c.maxQID
		c.mu.Unlock()
		r.SetResult(nvmeof.EncodeNumQueues(max(n, 1), max(n, 1)))
	case fid == nvmeof.FeatVolatileWC && !c.sub.disc:
		r.SetResult(nvmeof.VolatileWCEnable)
	case fid == nvmeof.FeatHostIdentifier && !c.sub.disc:
		if cmd.Value()&nvmeof.HostIDExtended == 0 {
			st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
			break
		}
		copy(r.Data(), c.hostID[:])
	default:
		st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	q.respond(r, st)
}
