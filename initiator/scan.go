package initiator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// nsInfo is what a scan learns of one namespace.
type nsInfo struct {
	id  nvmeof.IdentifyNamespace
	ids nvmeof.NSIdentifiers
	bs  int
}

// Rescan reads the controller's active namespaces (nvme_scan_work): the
// Identify active namespace list (CNS 2, page by page; a sequential scan up
// to NN if the controller does not support it), then for each NSID the
// namespace identification descriptors (CNS 3, required from NVMe 1.3 on)
// and Identify Namespace (CNS 0). New namespaces appear, vanished ones are
// marked gone, resized ones get their new size. It is done after connecting,
// after each reconnect, and on a Namespace Attribute Changed event.
func (c *Controller) Rescan(ctx context.Context) error {
	c.scanMu.Lock()
	defer c.scanMu.Unlock()
	a, err := c.liveAssociation()
	if err != nil {
		return err
	}
	nsids, err := c.activeNSIDs(ctx, a)
	if err != nil {
		return err
	}
	found := make(map[uint32]nsInfo, len(nsids))
	for _, nsid := range nsids {
		info, err := c.identifyNS(ctx, a, nsid)
		if err != nil {
			var st nvmeof.Status
			if errors.As(err, &st) {
				c.log.Warn("skipping namespace", zap.Uint32("nsid", nsid), zap.Error(err))
				continue
			}
			return err
		}
		if info != nil {
			found[nsid] = *info
		}
	}
	var changed []uint32
	c.mu.Lock()
	for nsid, ns := range c.namespaces {
		info, ok := found[nsid]
		if !ok || info.bs != ns.bs || (info.ids != ns.Identifiers() && ns.Identifiers() != nvmeof.NSIdentifiers{}) {
			// Gone, or reformatted / replaced: drop it (Linux removes a
			// namespace whose identifiers changed).
			ns.gone.Store(true)
			delete(c.namespaces, nsid)
			changed = append(changed, nsid)
			continue
		}
		size := int64(info.id.NSZE()) * int64(info.bs)
		if ns.size.Swap(size) != size {
			changed = append(changed, nsid)
		}
		ns.readOnly.Store(info.id.NSATTR()&nvmeof.NSATTRWriteProtected != 0)
		ns.mu.Lock()
		ns.id = info.id
		ns.mu.Unlock()
	}
	for nsid, info := range found {
		if _, ok := c.namespaces[nsid]; ok {
			continue
		}
		ns := &Namespace{c: c, nsid: nsid, bs: info.bs, ids: info.ids, id: info.id}
		for 1<<ns.lbaShift < info.bs {
			ns.lbaShift++
		}
		ns.size.Store(int64(info.id.NSZE()) * int64(info.bs))
		ns.readOnly.Store(info.id.NSATTR()&nvmeof.NSATTRWriteProtected != 0)
		c.namespaces[nsid] = ns
		changed = append(changed, nsid)
	}
	c.mu.Unlock()
	if len(changed) > 0 {
		slices.Sort(changed)
		c.log.Info("namespaces changed", zap.Uint32s("nsids", changed))
		c.emit(Event{Kind: EventNamespacesChanged, NSIDs: changed})
	}
	return nil
}

// activeNSIDs lists the active NSIDs (nvme_scan_ns_list, falling back to
// nvme_scan_ns_sequential).
func (c *Controller) activeNSIDs(ctx context.Context, a *association) ([]uint32, error) {
	var nsids []uint32
	buf := make([]byte, nvmeof.IdentifyDataSize)
	prev := uint32(0)
	for {
		clear(buf)
		err := c.adminDo(ctx, a, "Identify Active Namespace List", buf, false, func(s *nvmeof.SQE) {
			s.BuildIdentify(nvmeof.CNSActiveNSList, prev, 0, 0)
		}, nil)
		var st nvmeof.Status
		if errors.As(err, &st) && prev == 0 {
			// Not supported (before NVMe 1.1): every NSID up to NN.
			nn := a.id.NN()
			nsids = nsids[:0]
			for i := uint32(1); i <= nn && i < nvmeof.NSIDAll; i++ {
				nsids = append(nsids, i)
			}
			return nsids, nil
		}
		if err != nil {
			return nil, err
		}
		before := len(nsids)
		if nsids, err = nvmeof.ParseNSList(buf, nsids); err != nil {
			return nil, fmt.Errorf("initiator: %w", err)
		}
		if len(nsids)-before < nvmeof.MaxNSListEntries {
			return nsids, nil
		}
		prev = nsids[len(nsids)-1]
	}
}

// identifyNS reads one namespace; nil means it is not usable (inactive,
// NCAP 0, or a format we cannot do I/O with).
func (c *Controller) identifyNS(ctx context.Context, a *association, nsid uint32) (*nsInfo, error) {
	info := &nsInfo{}
	buf := make([]byte, nvmeof.IdentifyDataSize)
	// nvme_identify_ns_descs: required when VS >= 1.3.
	if a.vs.AtLeast(1, 3) {
		err := c.adminDo(ctx, a, "Identify Namespace Descriptors", buf, false, func(s *nvmeof.SQE) {
			s.BuildIdentify(nvmeof.CNSNSDescList, nsid, 0, 0)
		}, nil)
		if err != nil {
			return nil, err
		}
		if info.ids, err = nvmeof.ParseNSDescriptors(buf); err != nil {
			c.log.Warn("namespace descriptors", zap.Uint32("nsid", nsid), zap.Error(err))
			return nil, nil
		}
		clear(buf)
	}
	if err := c.adminDo(ctx, a, "Identify Namespace", buf, false, func(s *nvmeof.SQE) {
		s.BuildIdentify(nvmeof.CNSNamespace, nsid, 0, 0)
	}, nil); err != nil {
		return nil, err
	}
	info.id = nvmeof.IdentifyNamespace(buf)
	if info.id.NCAP() == 0 {
		return nil, nil // inactive (nvme_ns_info_from_identify)
	}
	lbaf := info.id.LBAF(info.id.FormatIndex())
	info.bs = lbaf.BlockSize()
	if info.bs == 0 {
		c.log.Warn("namespace with an invalid LBA size", zap.Uint32("nsid", nsid), zap.Uint8("lbads", lbaf.LBADS))
		return nil, nil
	}
	if lbaf.MS != 0 {
		c.log.Warn("namespace with metadata is not supported", zap.Uint32("nsid", nsid), zap.Uint16("ms", lbaf.MS))
		return nil, nil
	}
	if !info.ids.HasEUI64 && !info.ids.HasNGUID && !info.ids.HasUUID {
		info.ids.EUI64 = info.id.EUI64()
		info.ids.NGUID = info.id.NGUID()
		info.ids.HasEUI64 = info.ids.EUI64 != [8]byte{}
		info.ids.HasNGUID = info.ids.NGUID != [16]byte{}
	}
	return info, nil
}

// startAER enables the asynchronous events the initiator handles and
// sends the Asynchronous Event Request (nvme_enable_aen then
// nvme_async_event_work): Namespace Attribute Changed on I/O controllers,
// Discovery Log Page Change on discovery controllers, each only if OAES
// reports it.
func (c *Controller) startAER(a *association) {
	mask := a.id.OAES() & (nvmeof.AECNSAttr | nvmeof.AECDiscoveryChange)
	if a.id.CMIC()&nvmeof.CMICANA != 0 {
		mask |= a.id.OAES() & nvmeof.AECANAChange // nvme_enable_aen: NVME_AEN_CFG_ANA_CHANGE
	}
	if mask == 0 {
		return
	}
	err := c.adminDo(a.ctx, a, "Set Features (Async Event Configuration)", nil, false, func(s *nvmeof.SQE) {
		s.BuildSetFeatures(nvmeof.FeatAsyncEventConfig, 0, mask, false)
	}, nil)
	if err != nil {
		c.log.Warn("failed to configure AEN", zap.Error(err))
		return
	}
	a.aenCh = make(chan nvmeof.AEN, 4)
	a.aer = &nvmeof.HostRequest{}
	a.aer.Done = func(r *nvmeof.HostRequest) {
		// nvme_complete_async_event, on the engine goroutine: hand the
		// event over; an error (the queue ending, an abort) ends AERs.
		if r.Status() != nil {
			return
		}
		select {
		case a.aenCh <- nvmeof.AEN(r.CQE.Result()):
		default:
		}
	}
	a.wg.Add(1)
	go c.aenLoop(a)
	c.submitAER(a)
}

func (c *Controller) submitAER(a *association) {
	a.aer.SQE.BuildAER()
	if err := a.admin.Submit(a.aer); err != nil && a.ctx.Err() == nil {
		c.log.Warn("asynchronous event request", zap.Error(err))
	}
}

// aenLoop handles events and sends the next Asynchronous Event Request.
func (c *Controller) aenLoop(a *association) {
	defer a.wg.Done()
	for {
		var aen nvmeof.AEN
		select {
		case <-a.ctx.Done():
			return
		case aen = <-a.aenCh:
		}
		c.submitAER(a)
		c.log.Info("asynchronous event", zap.Uint8("type", aen.Type()), zap.Uint8("info", aen.Info()), zap.Uint8("lid", aen.LID()))
		switch {
		case aen.Type() == nvmeof.AERTypeNotice && aen.Info() == nvmeof.AERNoticeNSAttrChanged:
			// nvme_clear_changed_ns_log: reading the log (RAE clear)
			// re-arms the event; then rescan.
			buf := make([]byte, nvmeof.ChangedNSListSize)
			if err := c.adminDo(a.ctx, a, "Get Log Page (Changed Namespace List)", buf, false, func(s *nvmeof.SQE) {
				s.BuildGetLogPage(nvmeof.LIDChangedNSList, nvmeof.NSIDAll, 0, nvmeof.ChangedNSListSize)
			}, nil); err != nil {
				c.log.Warn("reading the changed namespace list", zap.Error(err))
			}
			if err := c.Rescan(a.ctx); err != nil {
				c.log.Warn("namespace scan", zap.Error(err))
			}
		case aen.Type() == nvmeof.AERTypeNotice && aen.Info() == nvmeof.AERNoticeDiscoveryChanged:
			c.emit(Event{Kind: EventDiscoveryChanged, AEN: aen})
		default:
			c.emit(Event{Kind: EventAsync, AEN: aen})
		}
	}
}
