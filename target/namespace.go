package target

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// namespace is one configured namespace of a subsystem. It is immutable
// once published in a subsystem's namespace table, except for its counters,
// its reference count and its last health sample; a reload that changes a
// namespace retires the object and publishes a new one.
type namespace struct {
	nsid  uint32
	nqn   string // the subsystem's NQN, for logs and identifiers
	cfg   NamespaceConfig
	state string // NamespaceOnline, NamespaceDisabled or NamespaceFailed
	err   string // why it failed
	// cause is the typed error of a failure, if there is one (the
	// backend's, or ErrGatewayGuard's): a refused reload carries it in
	// its FieldError, so that callers can tell the causes apart
	// (errors.Is).
	cause error
	// field is the configuration field a failure is about
	// ("subsystems[0].namespaces[1].backend.path").
	field string

	be       backend.Backend // nil unless online
	info     backend.Info
	lbaShift uint8
	// nsze is the size in logical blocks; it follows a backend resized
	// from outside (backend.SizeNotifier).
	nsze     atomic.Uint64
	readOnly bool
	// inline: the backend never sleeps (null, memory), so commands run on
	// the queue's engine goroutine without a hop to a worker.
	inline bool
	// nowait: the backend can try reads and writes without sleeping (a
	// buffered file, from the page cache): they run on the queue's
	// goroutine when they can, on a worker when they would wait.
	nowait backend.NowaitIO
	// async: the backend starts reads and writes without blocking and
	// completes them on its own goroutine (an rbd image, librbd's aio).
	async backend.AsyncIO
	ids   nvmeof.NSIdentifiers
	// wmu serializes the changes of the backend's writability and
	// exclusive lock (server.syncNamespaceWritable).
	wmu  sync.Mutex
	pool *workerPool // the shared pool, or a dedicated one (ownPool)
	// ownPool is set when the namespace has dedicated workers
	// (NamespaceConfig.IOWorkers) that close with it.
	ownPool bool

	// ref counts commands using the backend; refClosing is set when the
	// namespace is retired, after which tryGet fails and the last put
	// closes drained (as nvmet's percpu_ref on nvmet_ns).
	ref       atomic.Int64
	drained   chan struct{}
	drainOnce sync.Once
	// qrefs are the queues' own reference counts (nsRef): the I/O path
	// counts its commands there, on the queue's cache line, instead of
	// on ref; the namespace is drained when ref and all of them are zero.
	qrefsMu perfcount.Mutex
	qrefs   []*nsRef

	// Counters for the SMART / Health log and Status: shared with the
	// namespace this one replaced on a reload (same subsystem and NSID), so
	// that a reload does not restart them (issue 23.13).
	*nsCounters
	// met: backend latency for the metrics.
	met nsStats

	health atomic.Pointer[HealthStatus]
	// devHealth is the last device-reported sample (for the SMART log).
	devHealth atomic.Pointer[backend.Health]
}

// nsCounters are a namespace's SMART / Health and Status counters.
type nsCounters struct {
	readCmds, writeCmds, otherCmds atomic.Uint64
	readBytes, writeBytes          atomic.Uint64
	errors, mediaErrors            atomic.Uint64
	busySeconds                    atomic.Uint64
	// pathErrors, blocklisted, lastPathError: BackendHealth.
	pathErrors, blocklisted atomic.Uint64
	lastPathError           atomic.Pointer[string]
	// succeeded counts the commands whose backend work succeeded.
	succeeded atomic.Uint64
}

const refClosing = int64(1) << 62

// tryGet takes a reference for a command; it fails once the namespace is
// being retired.
func (ns *namespace) tryGet() bool {
	for {
		v := ns.ref.Load()
		if v&refClosing != 0 {
			return false
		}
		if ns.ref.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// put drops a command's reference.
func (ns *namespace) put() {
	if ns.ref.Add(-1) == refClosing {
		ns.checkDrained()
	}
}

// checkDrained closes drained if the namespace is retired and no
// reference is held, its own or a queue's. Every put that may be the last
// once the namespace is retiring calls it, after its decrement, and so
// does retire after it set refClosing: whichever comes last sees every
// count at zero.
func (ns *namespace) checkDrained() {
	if ns.ref.Load() != refClosing {
		return
	}
	ns.qrefsMu.Lock()
	for _, r := range ns.qrefs {
		if r.n.Load() != 0 {
			ns.qrefsMu.Unlock()
			return
		}
	}
	ns.qrefsMu.Unlock()
	ns.drainOnce.Do(func() { close(ns.drained) })
}

// nsRef is one queue's count of its commands holding a namespace (a
// queue's share of the namespace's reference count, registered in
// ns.qrefs): taking and dropping one touches the queue's counter, not a
// namespace-wide one. Retiring the namespace sets refClosing in ns.ref,
// which get checks after its increment, and then sums the counters (the
// increment and the check against the flag and the sum: one of the two
// sees the other).
type nsRef struct {
	ns *namespace
	n  atomic.Int64
	// dead: the queue is gone; its counter may be dropped from ns.qrefs
	// once zero, and takes no more references.
	dead atomic.Bool
}

// get takes a reference for a command; false once the namespace is being
// retired (or the queue is gone).
func (r *nsRef) get() bool {
	r.n.Add(1)
	if r.ns.ref.Load()&refClosing == 0 && !r.dead.Load() {
		return true
	}
	r.put()
	return false
}

// put drops a command's reference.
func (r *nsRef) put() {
	if r.n.Add(-1) == 0 && r.ns.ref.Load()&refClosing != 0 {
		r.ns.checkDrained()
	}
}

// newQueueRef registers a queue's counter on ns, dropping those of gone
// queues that hold nothing.
func (ns *namespace) newQueueRef() *nsRef {
	r := &nsRef{ns: ns}
	ns.qrefsMu.Lock()
	defer ns.qrefsMu.Unlock()
	ns.qrefs = slices.DeleteFunc(ns.qrefs, func(x *nsRef) bool { return x.dead.Load() && x.n.Load() == 0 })
	ns.qrefs = append(ns.qrefs, r)
	return r
}

// retire stops new commands and returns a channel closed once the commands
// in flight have dropped their references.
func (ns *namespace) retire() <-chan struct{} {
	for {
		v := ns.ref.Load()
		if v&refClosing != 0 {
			return ns.drained
		}
		if ns.ref.CompareAndSwap(v, v|refClosing) {
			ns.checkDrained()
			return ns.drained
		}
	}
}

// online reports whether hosts see the namespace.
func (ns *namespace) online() bool { return ns.state == NamespaceOnline }

// openNamespace opens the backend of a configured namespace; field is its
// configuration path ("subsystems[0].namespaces[1]"). The storage is
// checked first (backend.Config.Check), so that a failure names the field
// it is about. deferClaim opens it without its claim (a reload replacing a
// namespace on the same storage). A namespace that cannot open is returned
// in state failed, never as an error: it stays invisible to hosts and
// Status says why.
func (s *server) openNamespace(field, nqn string, cfg NamespaceConfig, deferClaim bool) *namespace {
	ns := &namespace{nsid: cfg.NSID, nqn: nqn, cfg: cfg, drained: make(chan struct{}), field: field, nsCounters: new(nsCounters)}
	if !cfg.IsEnabled() {
		ns.state = NamespaceDisabled
		return ns
	}
	if fe := cfg.check(); fe != nil {
		ns.state, ns.err, ns.field, ns.cause = NamespaceFailed, fe.Reason, field+"."+fe.Field, fe.Err
		return ns
	}
	if f := s.backendOpening.Load(); f != nil {
		(*f)(nqn, cfg)
	}
	bc, err := cfg.BackendConfig()
	if err == nil {
		bc.DeferClaim = deferClaim
		ns.be, err = backend.Open(bc)
	}
	if err != nil {
		ns.state, ns.err, ns.field, ns.cause = NamespaceFailed, err.Error(), field+".backend", err
		var ce *backend.ConfigError
		if errors.As(err, &ce) {
			ns.err, ns.field = ce.Reason, field+".backend."+ce.Field
		}
		return ns
	}
	ns.info = ns.be.Info()
	bs := ns.be.BlockSize()
	if bs < 512 || bs&(bs-1) != 0 || ns.be.Size() < int64(bs) {
		_ = ns.be.Close()
		ns.be = nil
		ns.state, ns.err, ns.field = NamespaceFailed, fmt.Sprintf("backend block size %d or size %d unusable", bs, ns.info.Size), field+".backend"
		return ns
	}
	ns.lbaShift = uint8(bits.TrailingZeros32(bs))
	ns.nsze.Store(uint64(ns.be.Size()) >> ns.lbaShift)
	ns.readOnly = ns.info.ReadOnly
	ns.inline = ns.info.Kind == backend.KindNull || ns.info.Kind == backend.KindMemory
	ns.nowait, _ = ns.be.(backend.NowaitIO)
	ns.async, _ = ns.be.(backend.AsyncIO)
	ns.ids = namespaceIDs(nqn, &cfg, ns.info)
	ns.pool = s.shared
	if cfg.IOWorkers > 0 {
		ns.pool = newWorkerPool(cfg.IOWorkers, s.execIO)
		ns.ownPool = true
	}
	ns.state = NamespaceOnline
	if sn, ok := ns.be.(backend.SizeNotifier); ok {
		s.bg.Add(1)
		go s.watchSize(ns, sn)
	}
	// Status shows health from the start (block devices: a SMART read).
	ns.sampleHealth(time.Now())
	return ns
}

// watchSize follows a backend resized from outside (an RBD image grown or
// shrunk with rbd resize): the namespace's size changes and the hosts of
// its subsystem get a Namespace Attribute Changed notice, so that they read
// the new size (nvmet_ns_revalidate + nvmet_ns_changed). It ends when the
// backend closes.
func (s *server) watchSize(ns *namespace, sn backend.SizeNotifier) {
	defer s.bg.Done()
	for range sn.SizeChanged() {
		n := uint64(ns.be.Size()) >> ns.lbaShift
		old := ns.nsze.Swap(n)
		if n == old || n == 0 {
			if n == 0 {
				ns.nsze.Store(old) // smaller than a block: keep serving the old size
			}
			continue
		}
		s.log.Info("namespace resized by its backend", zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid),
			zap.Uint64("old_blocks", old), zap.Uint64("new_blocks", n), zap.Uint32("block_size", uint32(1)<<ns.lbaShift))
		s.regMu.RLock()
		sub := s.subsystems[ns.nqn]
		s.regMu.RUnlock()
		if sub != nil && sub.ns.Load().byID[ns.nsid] == ns {
			sub.nsChanged([]uint32{ns.nsid})
		}
	}
}

// close waits for the commands in flight (bounded by deadline), flushes and
// closes the backend. It reports the first error.
func (ns *namespace) close(deadline <-chan struct{}) error {
	if ns.be == nil {
		return nil
	}
	select {
	case <-ns.retire():
	case <-deadline:
	}
	if ns.ownPool {
		ns.pool.close()
	}
	err := ns.be.Flush()
	if cerr := ns.be.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("namespace %d of %s: %w", ns.nsid, ns.nqn, err)
	}
	return nil
}

// namespaceIDs returns the identifiers of a namespace: those configured,
// and for the others values derived from the subsystem NQN, the NSID and
// the backend's identity (kind and backend.Info.ID), so they are stable
// across restarts and unique per subsystem and storage (protocol.md §12.9:
// the Linux host drops a namespace whose identifiers change).
func namespaceIDs(nqn string, cfg *NamespaceConfig, info backend.Info) nvmeof.NSIdentifiers {
	ids, err := cfg.Identifiers()
	if err != nil { // Validate rejects these; derive everything then
		ids = nvmeof.NSIdentifiers{}
	}
	derive := func(label string) [32]byte {
		h := sha256.New()
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], cfg.NSID)
		for _, part := range [][]byte{[]byte("nvmetd " + label), []byte(nqn), n[:], []byte(info.Kind), []byte(info.ID)} {
			var l [4]byte
			binary.BigEndian.PutUint32(l[:], uint32(len(part)))
			h.Write(l[:])
			h.Write(part)
		}
		var sum [32]byte
		h.Sum(sum[:0])
		return sum
	}
	if !ids.HasNGUID {
		sum := derive("nguid")
		copy(ids.NGUID[:], sum[:16])
		ids.HasNGUID = true
	}
	if !ids.HasUUID {
		sum := derive("uuid")
		copy(ids.UUID[:], sum[:16])
		// RFC 9562 version 8 (custom), variant 10b.
		ids.UUID[6] = ids.UUID[6]&0x0F | 0x80
		ids.UUID[8] = ids.UUID[8]&0x3F | 0x80
		ids.HasUUID = true
	}
	if !ids.HasEUI64 {
		sum := derive("eui64")
		copy(ids.EUI64[:], sum[:8])
		// A locally administered, individual (unicast) EUI-64: bit 1 of the
		// first octet set, bit 0 clear (IEEE guidelines for EUI-64).
		ids.EUI64[0] = ids.EUI64[0]&^0x01 | 0x02
		ids.HasEUI64 = true
	}
	ids.CSI, ids.HasCSI = nvmeof.CSINVM, true
	return ids
}

// idStrings formats identifiers the way the configuration writes them.
func idStrings(ids nvmeof.NSIdentifiers) (nguid, uuid, eui64 string) {
	if ids.HasNGUID {
		nguid = hex.EncodeToString(ids.NGUID[:])
	}
	if ids.HasUUID {
		uuid = nvmeof.FormatUUID(ids.UUID)
	}
	if ids.HasEUI64 {
		eui64 = hex.EncodeToString(ids.EUI64[:])
	}
	return nguid, uuid, eui64
}

// sampleHealth reads the backend's health and keeps the sample.
func (ns *namespace) sampleHealth(now time.Time) {
	if ns.be == nil {
		return
	}
	h, err := ns.be.Health()
	hs := NewHealthStatus(h, err, now)
	ns.health.Store(&hs)
	if err == nil && h.Available {
		ns.devHealth.Store(&h)
	}
}

// statser is a backend that counts its paths (backend.Stats).
type statser interface{ Stats() backend.Stats }

// backendStats returns the backend's path counters; nil for a backend
// without them.
func (ns *namespace) backendStats() *BackendStats {
	b, ok := ns.be.(statser)
	if !ok {
		return nil
	}
	st := b.Stats()
	return &BackendStats{
		NowaitDone: st.NowaitDone, NowaitMissed: st.NowaitMissed,
		BounceReads: st.BounceReads, BounceWrites: st.BounceWrites, ZeroFallbacks: st.ZeroFallbacks,
		AllocatedBytes: st.AllocatedBytes,
	}
}

// ioCounters returns the namespace's counters.
func (ns *namespace) ioCounters() IOCounters {
	return IOCounters{
		ReadCommands: ns.readCmds.Load(), WriteCommands: ns.writeCmds.Load(), OtherCommands: ns.otherCmds.Load(),
		ReadBytes: ns.readBytes.Load(), WriteBytes: ns.writeBytes.Load(), Errors: ns.errors.Load(),
	}
}

// nsTable is the immutable set of a subsystem's namespaces, swapped whole
// on a reload so that the I/O path looks namespaces up without locks.
type nsTable struct {
	byID   map[uint32]*namespace // every configured namespace
	active []uint32              // online NSIDs, ascending
	// restricted is set when a namespace is limited to some hosts
	// (auth_visibility.go).
	restricted bool
}

// lookup finds an online namespace and takes a reference on it, or returns
// the status nvmet answers (nvmet_req_find_ns): Invalid Namespace with DNR
// for an NSID that is not configured, Internal Path Error for one that is
// configured but not available (disabled, failed, being replaced).
func (t *nsTable) lookup(nsid uint32) (*namespace, nvmeof.Status) {
	ns := t.byID[nsid]
	if ns == nil {
		return nil, nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
	}
	if !ns.online() || !ns.tryGet() {
		return nil, nvmeof.StatusInternalPathError
	}
	return ns, nvmeof.StatusSuccess
}

// newNSTable builds a table from namespaces.
func newNSTable(list []*namespace) *nsTable {
	t := &nsTable{byID: make(map[uint32]*namespace, len(list))}
	for _, ns := range list {
		t.byID[ns.nsid] = ns
	}
	t.active = t.activeIDs()
	t.restricted = restrictedTable(t)
	return t
}

func (t *nsTable) activeIDs() []uint32 {
	var ids []uint32
	for id, ns := range t.byID {
		if ns.online() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
