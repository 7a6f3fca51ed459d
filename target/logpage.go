package target

import (
	"math"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// getLogPage serves Get Log Page (nvmet_execute_get_log_page; for discovery
// controllers nvmet_execute_disc_get_log_page). The data length must be
// NUMD dwords; the host may read any dword-aligned part of a log (LPO), and
// reading past its end returns zeroes.
func (c *controller) getLogPage(q *queue, r request) {
	cmd := r.SQE().GetLogPageCmd()
	d := r.Data()
	if uint64(len(d)) != cmd.NumBytes() {
		q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
		return
	}
	lpo := cmd.LPO()
	if lpo&3 != 0 || cmd.OT() {
		// The offset must be dword aligned; index offsets are not supported.
		q.respond(r, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
		return
	}
	// An event kind is unmasked (the host read its log page without
	// Retain Asynchronous Event: NVMe Base 2.0 §5.2, §5.16.1.12 for the
	// ANA log) before its page is built, never after: a change that comes
	// between the two then raises a new event (the page may already show
	// it: the host reads once more), where unmasking after the build
	// would drop that change's event, and the host would keep the older
	// page until some later change. Every change publishes its state
	// before it raises its event, so a change whose event found the kind
	// still masked is in the page.
	var page []byte
	st := nvmeof.StatusSuccess
	lid := cmd.LID()
	switch {
	case c.sub.disc && lid == nvmeof.LIDDiscovery:
		c.unmask(nvmeof.AECDiscoveryChange, cmd.RAE())
		page = c.s.discoveryLog(c, q)
	case c.sub.disc:
		st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
	case lid == nvmeof.LIDErrorInfo:
		page = make([]byte, errorLogSlots*nvmeof.ErrorLogEntrySize)
		c.errorLog(page)
	case lid == nvmeof.LIDSMART:
		var log nvmeof.SMARTLog
		st = c.smartLog(&log, r.SQE().NSID())
		page = log[:]
	case lid == nvmeof.LIDFirmwareSlot:
		var log nvmeof.FirmwareSlotLog
		log.SetAFI(1)
		log.SetFRS(1, c.sub.cfg.Load().FirmwareRevision)
		page = log[:]
	case lid == nvmeof.LIDChangedNSList:
		c.unmask(nvmeof.AECNSAttr, cmd.RAE())
		page = make([]byte, nvmeof.ChangedNSListSize)
		c.takeChangedNS(page)
	case lid == nvmeof.LIDCommandEffects:
		if cmd.CSI() != nvmeof.CSINVM {
			st = nvmeof.StatusInvalidLogPage // nvmet: no DNR
			break
		}
		var log nvmeof.CommandEffectsLog
		commandEffects(&log)
		page = log[:]
	case lid == nvmeof.LIDANA && !c.sub.disc:
		c.unmask(nvmeof.AECANAChange, cmd.RAE())
		page = c.anaLog(cmd.LSP()&nvmeof.ANALSPRGO != 0)
		if h := c.s.logPageBuilt.Load(); h != nil {
			(*h)(c, lid)
		}
		// The host sizes the log by its maximum (header, NANAGRPID
		// descriptors and MNAN NSIDs) and libnvme reads it in 4 KiB
		// pieces at increasing offsets (nvme ana-log): every offset
		// within that size is valid and reads zeroes past the groups.
		if max := c.anaLogMaxSize(); len(page) < max {
			page = append(page, make([]byte, max-len(page))...)
		}
	default:
		st = nvmeof.StatusInvalidField | nvmeof.StatusDNR
	}
	if st == nvmeof.StatusSuccess {
		if err := nvmeof.CopyLogPage(d, page, lpo); err != nil {
			st = nvmeof.StatusFromError(err)
		}
	}
	q.respond(r, st)
}

// commandEffects lists the commands the target supports
// (nvmet_get_cmd_effects_admin, nvmet_get_cmd_effects_nvm).
func commandEffects(log *nvmeof.CommandEffectsLog) {
	for _, op := range []uint8{nvmeof.AdminGetLogPage, nvmeof.AdminIdentify, nvmeof.AdminAbort, nvmeof.AdminSetFeatures,
		nvmeof.AdminGetFeatures, nvmeof.AdminAsyncEvent, nvmeof.AdminKeepAlive} {
		log.SetACS(op, nvmeof.EffectsCSUPP)
	}
	log.SetIOCS(nvmeof.NVMRead, nvmeof.EffectsCSUPP)
	log.SetIOCS(nvmeof.NVMFlush, nvmeof.EffectsCSUPP)
	log.SetIOCS(nvmeof.NVMDatasetManagement, nvmeof.EffectsCSUPP|nvmeof.EffectsLBCC)
	log.SetIOCS(nvmeof.NVMWrite, nvmeof.EffectsCSUPP|nvmeof.EffectsLBCC)
	log.SetIOCS(nvmeof.NVMWriteZeroes, nvmeof.EffectsCSUPP|nvmeof.EffectsLBCC)
}

// smartLog fills the SMART / Health Information log for one namespace or,
// for NSID 0 or 0xFFFFFFFF, for the whole subsystem: the target's own
// counters (commands, data units of 1000 × 512 bytes rounded up, controller
// busy time, media errors, power-on time since the target started) plus,
// for block devices, what the device reports (critical warning,
// temperature, spare, wear, its own media errors).
func (c *controller) smartLog(log *nvmeof.SMARTLog, nsid uint32) nvmeof.Status {
	tab := c.sub.ns.Load()
	var list []*namespace
	if nsid == 0 || nsid == nvmeof.NSIDAll {
		for _, id := range c.activeNS(tab) {
			list = append(list, tab.byID[id])
		}
	} else {
		ns, st := c.lookupNS(tab, nsid)
		if st != nvmeof.StatusSuccess {
			return st
		}
		ns.put()
		list = append(list, ns)
	}
	var reads, writes, rbytes, wbytes, media, busy uint64
	var warn uint8
	var temp uint16
	spare, spareThresh, used := uint8(100), uint8(0), uint8(0)
	haveSpare := false
	for _, ns := range list {
		reads += ns.readCmds.Load()
		writes += ns.writeCmds.Load()
		rbytes += ns.readBytes.Load()
		wbytes += ns.writeBytes.Load()
		media += ns.mediaErrors.Load()
		busy += ns.busySeconds.Load()
		if h := ns.devHealth.Load(); h != nil {
			if h.Valid&backend.HealthCriticalWarning != 0 {
				warn |= h.CriticalWarning
			}
			if h.Valid&backend.HealthTemperature != 0 {
				temp = max(temp, h.TemperatureKelvin)
			}
			if h.Valid&backend.HealthAvailableSpare != 0 {
				if !haveSpare || h.AvailableSpare < spare {
					spare = h.AvailableSpare
				}
				haveSpare = true
			}
			if h.Valid&backend.HealthAvailableSpareThreshold != 0 {
				spareThresh = max(spareThresh, h.AvailableSpareThreshold)
			}
			if h.Valid&backend.HealthPercentageUsed != 0 {
				used = max(used, h.PercentageUsed)
			}
			if h.Valid&backend.HealthMediaErrors != 0 {
				media = satAdd(media, h.MediaErrors)
			}
		}
	}
	log.SetCriticalWarning(warn)
	log.SetCompositeTemperature(temp)
	log.SetAvailableSpare(spare)
	log.SetAvailableSpareThreshold(spareThresh)
	log.SetPercentageUsed(used)
	// Data units are thousands of 512-byte units, rounded up.
	log.SetDataUnitsRead(nvmeof.U128((rbytes/512 + 999) / 1000))
	log.SetDataUnitsWritten(nvmeof.U128((wbytes/512 + 999) / 1000))
	log.SetHostReadCommands(nvmeof.U128(reads))
	log.SetHostWriteCommands(nvmeof.U128(writes))
	log.SetControllerBusyTime(nvmeof.U128(busy / 60))
	log.SetPowerCycles(nvmeof.U128(1))
	log.SetPowerOnHours(nvmeof.U128(uint64(time.Since(c.s.startedAt) / time.Hour)))
	log.SetUnsafeShutdowns(nvmeof.U128(0))
	log.SetMediaErrors(nvmeof.U128(media))
	log.SetErrorLogEntries(nvmeof.U128(c.errorCount()))
	return nvmeof.StatusSuccess
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
