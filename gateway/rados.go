//go:build rbd

package gateway

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
)

// Built says whether this build has the Ceph client libraries (the rbd
// build tag): without them a gateway cannot join its group.
const Built = true

// librados.h LIBRADOS_LOCK_FLAG_MAY_RENEW and LIBRADOS_LOCK_FLAG_MUST_RENEW.
const (
	lockMayRenew  byte = 1 << 0
	lockMustRenew byte = 1 << 1
)

// omap keys on a group object.
const (
	keyHolder  = "holder"           // the Record (JSON)
	keyRequest = "handover_request" // the gateway asking for the group
	keyConfig  = "config"           // on the config object: the canonical configuration
)

// RADOS is the [Cluster] on Ceph: one object per ANA group in the pool,
// each with an exclusive cls_lock (cookie: the gateway's session) whose
// duration is the lease, the holder's [Record] and the handover request in
// its omap, and a watch so that a change notified by another gateway is
// seen at once. Fencing is `osd blocklist add` through the monitor (the
// caps "profile rbd" allow it).
type RADOS struct {
	o       RADOSOptions
	conn    *rados.Conn
	ioctx   *rados.IOContext
	addrs   string
	changed chan struct{}
	// configChanged is signalled when the config object is notified
	// (RADOSOptions.WatchConfig): a new version of the group's
	// configuration may be stored.
	configChanged chan struct{}
	stop          chan struct{} // closed by Close: ends the watch readers
	watches       []*rados.Watcher
	wg            sync.WaitGroup // watch readers and notifies

	mu      sync.Mutex
	written map[uint32]string // the record JSON last written per group
	closed  bool
	// configWatched: the config object is watched (WatchConfigObject).
	configWatched bool
	// blocklistAdds counts the entries fences added (BlocklistAdds).
	blocklistAdds int
}

var _ Cluster = (*RADOS)(nil)

// DialRADOS connects the gateway's own RADOS client, creates the group
// objects if missing and watches them.
func DialRADOS(o RADOSOptions) (_ *RADOS, err error) {
	if o.Pool == "" || o.GroupName == "" || o.Lease <= 0 {
		return nil, errors.New("gateway: RADOS options need a pool, a group name and a lease")
	}
	if o.BlocklistExpire < 0 || o.BlocklistExpire > MaxBlocklistExpire {
		return nil, fmt.Errorf("gateway: blocklist expiry %s is out of range (0 for the default, up to %s)", o.BlocklistExpire, MaxBlocklistExpire)
	}
	conn, err := rados.NewConnWithUser(o.ClientID)
	if err != nil {
		return nil, fmt.Errorf("gateway: create the RADOS client: %w", err)
	}
	defer func() {
		if err != nil {
			conn.Shutdown()
		}
	}()
	if o.CephConf != "" {
		if err := conn.ReadConfigFile(o.CephConf); err != nil {
			return nil, fmt.Errorf("gateway: read %s: %w", o.CephConf, err)
		}
	} else if err := conn.ReadDefaultConfigFile(); err != nil {
		return nil, fmt.Errorf("gateway: read the default ceph.conf: %w", err)
	}
	secs := func(d, def time.Duration) string {
		if d <= 0 {
			d = def
		}
		return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10)
	}
	settings := [][2]string{
		{"rados_osd_op_timeout", secs(o.OpTimeout, 5*time.Second)},
		{"rados_mon_op_timeout", secs(o.MonOpTimeout, 30*time.Second)},
		{"client_mount_timeout", secs(o.ConnectTimeout, 10*time.Second)},
	}
	if o.Keyring != "" {
		settings = append(settings, [2]string{"keyring", o.Keyring})
	}
	for _, kv := range settings {
		if err := conn.SetConfigOption(kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("gateway: set %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := conn.Connect(); err != nil {
		return nil, fmt.Errorf("gateway: connect to the cluster as client.%s: %w", o.ClientID, classify(err))
	}
	ioctx, err := conn.OpenIOContext(o.Pool)
	if err != nil {
		return nil, fmt.Errorf("gateway: pool %s: %w", o.Pool, classify(err))
	}
	ioctx.SetNamespace(o.RADOSNamespace)
	addrs, err := conn.GetAddrs()
	if err != nil {
		ioctx.Destroy()
		return nil, fmt.Errorf("gateway: client address: %w", err)
	}
	r := &RADOS{o: o, conn: conn, ioctx: ioctx, addrs: addrs, changed: make(chan struct{}, 1), configChanged: make(chan struct{}, 1),
		stop: make(chan struct{}), written: map[uint32]string{}}
	defer func() {
		if err != nil {
			r.closeWatches()
			close(r.stop)
			r.wg.Wait()
			ioctx.Destroy()
		}
	}()
	for _, g := range o.Groups {
		oid := ObjectName(o.GroupName, g)
		if err := ioctx.Create(oid, rados.CreateIdempotent); err != nil {
			return nil, fmt.Errorf("gateway: create %s: %w", oid, classify(err))
		}
		w, err := ioctx.Watch(oid)
		if err != nil {
			return nil, fmt.Errorf("gateway: watch %s: %w", oid, classify(err))
		}
		r.watches = append(r.watches, w)
		r.wg.Go(func() { r.watchLoop(oid, w, r.signal) })
	}
	if o.WatchConfig {
		oid := ConfigObjectName(o.GroupName)
		if err := ioctx.Create(oid, rados.CreateIdempotent); err != nil {
			return nil, fmt.Errorf("gateway: create %s: %w", oid, classify(err))
		}
		if _, err := r.WatchConfigObject(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// WatchConfigObject watches the group's config object, if it exists and
// is not watched yet, so that ConfigChanged is signalled when it is
// notified; it reports whether it is watched. It does not create the
// object: a gateway keeping the group's configuration in its file must
// find it absent, or holding the agreement text, when it first compares
// (CheckConfig's exclusive create), not created empty by a watch.
func (r *RADOS) WatchConfigObject() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.configWatched {
		return true, nil
	}
	if r.closed {
		return false, nil
	}
	oid := ConfigObjectName(r.o.GroupName)
	w, err := r.ioctx.Watch(oid)
	if err != nil {
		if errnoOf(err) == syscall.ENOENT {
			return false, nil
		}
		return false, fmt.Errorf("gateway: watch %s: %w", oid, classify(err))
	}
	r.watches = append(r.watches, w)
	r.configWatched = true
	sig := func() {
		select {
		case r.configChanged <- struct{}{}:
		default:
		}
	}
	r.wg.Go(func() { r.watchLoop(oid, w, sig) })
	return true, nil
}

// watchBackoff bounds the wait between two attempts to watch an object
// again after its watch failed.
const watchBackoff = 5 * time.Second

// watchLoop reads the watch w of oid (readWatch) and, when it fails,
// deletes it and watches oid again (with a backoff: the object may be
// gone until a gateway takes the group and so creates it again), so that
// notifications keep coming after an error. Each failure signals Changed
// (something may have happened meanwhile). It ends at Close.
func (r *RADOS) watchLoop(oid string, w *rados.Watcher, signal func()) {
	backoff := 100 * time.Millisecond
	for {
		if !r.readWatch(w, signal) {
			return // Close deletes the watches
		}
		_ = w.Delete()
		signal()
		for {
			select {
			case <-r.stop:
				return
			case <-time.After(backoff):
			}
			nw, err := r.ioctx.Watch(oid)
			if err == nil {
				r.mu.Lock()
				if r.closed {
					r.mu.Unlock()
					_ = nw.Delete()
					return
				}
				r.watches = slices.DeleteFunc(r.watches, func(x *rados.Watcher) bool { return x == w })
				r.watches = append(r.watches, nw)
				r.mu.Unlock()
				w, backoff = nw, 100*time.Millisecond
				signal()
				break
			}
			backoff = min(2*backoff, watchBackoff)
		}
	}
}

func (r *RADOS) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// readWatch acknowledges the notifications of one watch and signals
// Changed. It returns true when the watch failed (an error: the client
// lost the OSD, was blocklisted, or the object was removed), false at
// Close.
func (r *RADOS) readWatch(w *rados.Watcher, signal func()) bool {
	ev, errs := w.Events(), w.Errors()
	for {
		select {
		case <-r.stop:
			// Delete may fail (a fenced client cannot unwatch) and
			// then leaves the channels open.
			return false
		case e, ok := <-ev:
			if !ok {
				return false // deleted
			}
			if string(e.Data) == aliveProbe {
				// A liveness probe (AliveMembers): answered with
				// this gateway's name; nothing changed.
				_ = e.Ack([]byte(r.selfName()))
				continue
			}
			_ = e.Ack(nil)
			signal()
		case _, ok := <-errs:
			if !ok {
				return false
			}
			return true
		}
	}
}

// closeWatches deletes the watches. The watch loops still read their
// events meanwhile (Close stops them only afterwards), and the pending
// notify callbacks are flushed first: go-ceph's Watcher.Delete closes the
// events channel right after rados_unwatch2, which does not wait for
// callbacks in flight (rados_watch_flush does), so a callback blocked on
// a send with nobody reading raced the close (a data race the CI's -race
// run of TestGroupConfigCompareAndSet found; with bad luck a send on a
// closed channel).
func (r *RADOS) closeWatches() {
	_ = r.conn.WatcherFlush()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.watches {
		_ = w.Delete()
	}
	r.watches = nil
}

// Close unwatches and shuts the client down.
func (r *RADOS) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.closeWatches()
	close(r.stop)
	r.wg.Wait()
	r.ioctx.Destroy()
	r.conn.Shutdown()
}

// Changed is signalled after a group object was notified.
func (r *RADOS) Changed() <-chan struct{} { return r.changed }

// Addrs is the address vector of the gateway's own client.
func (r *RADOS) Addrs() string { return r.addrs }

// InstanceID is the gateway client's global id (client.<id>).
func (r *RADOS) InstanceID() uint64 { return r.conn.GetInstanceID() }

func errnoOf(err error) syscall.Errno {
	var ce interface{ ErrorCode() int }
	if errors.As(err, &ce) {
		if c := ce.ErrorCode(); c < 0 {
			return syscall.Errno(-c)
		} else if c > 0 {
			return syscall.Errno(c)
		}
	}
	return 0
}

// classify maps EBLOCKLISTED (ESHUTDOWN) to ErrFenced and keeps the
// errno in the chain.
func classify(err error) error {
	if err == nil {
		return nil
	}
	e := errnoOf(err)
	switch {
	case e == syscall.ESHUTDOWN:
		return fmt.Errorf("%w: %w (%w)", ErrFenced, err, e)
	case e != 0:
		return fmt.Errorf("%w (%w)", err, e)
	}
	return err
}

func (r *RADOS) oid(g uint32) string { return ObjectName(r.o.GroupName, g) }

// notify tells the other gateways' watches that oid changed, in the
// background (a frozen gateway's watch would hold a notify until its
// timeout).
func (r *RADOS) notify(oid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Go(func() { _, _, _ = r.ioctx.NotifyWithTimeout(oid, nil, time.Second) })
}

// Read returns the group's lock holder and record. The lockers and the
// record are separate reads, so the record is read before and after the
// lockers and the answer stands only if it did not change in between: a
// holder locks before it writes its record and writes its released record
// before it unlocks, so "unlocked, and a record not released" then means
// that the holder's lease expired (never a holder that was taking the lock,
// or releasing it, between the reads).
func (r *RADOS) Read(g uint32) (Observed, error) {
	oid := r.oid(g)
	var o Observed
	for try := 0; ; try++ {
		before, err := r.ioctx.GetOmapValues(oid, "", "", 16)
		if err != nil && errnoOf(err) != syscall.ENOENT {
			return o, fmt.Errorf("read the record of %s: %w", oid, classify(err))
		}
		// cls_lock's get_info drops expired lockers (by the OSD's clock).
		li, err := r.ioctx.ListLockers(oid, LockName)
		if err != nil && errnoOf(err) != syscall.ENOENT {
			return o, fmt.Errorf("list the lockers of %s: %w", oid, classify(err))
		}
		vals, err := r.ioctx.GetOmapValues(oid, "", "", 16)
		if err != nil && errnoOf(err) != syscall.ENOENT {
			return o, fmt.Errorf("read the record of %s: %w", oid, classify(err))
		}
		if string(before[keyHolder]) != string(vals[keyHolder]) {
			if try < 3 {
				continue
			}
			return o, fmt.Errorf("read %s: the record changed during each of %d reads", oid, try+1)
		}
		o = Observed{}
		if li != nil && li.NumLockers > 0 && len(li.Cookies) > 0 {
			o.Locked, o.LockerSession = true, li.Cookies[0]
		}
		if b, ok := vals[keyHolder]; ok {
			if err := json.Unmarshal(b, &o.Record); err != nil {
				return o, fmt.Errorf("record of %s: %w", oid, err)
			}
		}
		o.HandoverRequest = string(vals[keyRequest])
		// The copy of the record on the records object: newer if the
		// group object was removed (or rewritten from an older state),
		// so that even a gateway that never saw the group fences the
		// last holder.
		mo := RecordsObjectName(r.o.GroupName)
		mv, err := r.ioctx.GetOmapValues(mo, "", mirrorKey(g), 16)
		if err != nil && errnoOf(err) != syscall.ENOENT {
			return o, fmt.Errorf("read the copy of the record of %s in %s: %w", oid, mo, classify(err))
		}
		if b, ok := mv[mirrorKey(g)]; ok {
			var m Record
			if err := json.Unmarshal(b, &m); err != nil {
				return o, fmt.Errorf("copy of the record of %s in %s: %w", oid, mo, err)
			}
			if m.Epoch > o.Record.Epoch {
				o.Record = m
			}
		}
		return o, nil
	}
}

// mirrorKey is the omap key of group g's record copy on the records
// object.
func mirrorKey(g uint32) string { return fmt.Sprintf("ana.%d", g) }

func (r *RADOS) lock(g uint32, rec Record, flags byte) error {
	oid := r.oid(g)
	ret, err := r.ioctx.LockExclusive(oid, LockName, rec.Session, rec.Name, r.o.Lease, &flags)
	switch {
	case err != nil && errnoOf(err) == syscall.ENOENT:
		return fmt.Errorf("renew the lock of %s: %w (it expired)", oid, ErrLockBusy)
	case err != nil:
		return fmt.Errorf("lock %s: %w", oid, classify(err))
	case ret == -int(syscall.EBUSY):
		return fmt.Errorf("lock %s: %w", oid, ErrLockBusy)
	}
	return nil
}

// clsLockExclusive is cls_lock's LOCK_EXCLUSIVE (cls_lock_types.h
// ClsLockType).
const clsLockExclusive = 1

// assertLockedOp is the input of cls_lock's assert_locked method, an
// encoded cls_lock_assert_op (cls_lock_ops.h): ENCODE_START(1, 1) (struct
// version, compat version, u32 length), the lock name, the lock type (u8),
// the cookie and the tag (strings: u32 length and bytes; little-endian).
// The OSD checks that the object's lock is held, exclusive, with that tag,
// by this client (its entity name) with that cookie.
func assertLockedOp(name, cookie, tag string) []byte {
	var body []byte
	str := func(s string) {
		body = binary.LittleEndian.AppendUint32(body, uint32(len(s)))
		body = append(body, s...)
	}
	str(name)
	body = append(body, clsLockExclusive)
	str(cookie)
	str(tag)
	out := []byte{1, 1}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...)
}

// writeRecord writes rec as the group's record in one operation that
// first asserts that this client holds the group's lock with rec's
// session (cls_lock assert_locked): a holder whose lock was lost (expired
// and taken, or its object removed) cannot overwrite a successor's record.
func (r *RADOS) writeRecord(g uint32, rec Record, clearRequest bool) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	op := rados.CreateWriteOp()
	defer op.Release()
	op.Exec("lock", "assert_locked", assertLockedOp(LockName, rec.Session, ""))
	op.SetOmap(map[string][]byte{keyHolder: b})
	if clearRequest {
		op.RmOmapKeys([]string{keyRequest})
	}
	if err := op.Operate(r.ioctx, r.oid(g), rados.OperationNoFlag); err != nil {
		if e := errnoOf(err); e == syscall.EBUSY || e == syscall.ENOENT {
			return fmt.Errorf("write the record of %s: %w (the lock is not held by this session: %w)", r.oid(g), ErrLockBusy, e)
		}
		return fmt.Errorf("write the record of %s: %w", r.oid(g), classify(err))
	}
	// The copy, after the record: a copy that lags is older than the
	// record and ignored; one that failed fails the write (an acquire
	// gives the lock back, a release leaves the lock to expire).
	mo := RecordsObjectName(r.o.GroupName)
	if err := r.ioctx.SetOmap(mo, map[string][]byte{mirrorKey(g): b}); err != nil {
		return fmt.Errorf("write the copy of the record of %s in %s: %w", r.oid(g), mo, classify(err))
	}
	r.mu.Lock()
	r.written[g] = string(b)
	r.mu.Unlock()
	return nil
}

// Acquire takes the lock (may-renew: a lock this session still holds is
// renewed) and writes rec, clearing the handover request. If the record
// cannot be written the lock is given back.
//
// Under the lock it first checks that no gateway held the group since the
// read on which the acquisition was decided: the record (and its copy)
// must have an epoch below rec.Epoch, which the machine sets one above the
// highest it read. A fence between that read and this lock can outlast a
// lease (it waits for monitor commits); a gateway that took the group,
// served and released it, or whose lease ran out, meanwhile was not
// fenced by this acquisition, which would then also write its record over
// that holder's at the same epoch. Then the lock is given back and the
// error matches ErrHolderSince (and ErrLockBusy): the group is read
// again, and that holder fenced.
func (r *RADOS) Acquire(g uint32, rec Record) error {
	if err := r.lock(g, rec, lockMayRenew); err != nil {
		return err
	}
	if err := r.checkEpoch(g, rec.Epoch); err != nil {
		_, _ = r.ioctx.Unlock(r.oid(g), LockName, rec.Session)
		return err
	}
	if err := r.writeRecord(g, rec, true); err != nil {
		_, _ = r.ioctx.Unlock(r.oid(g), LockName, rec.Session)
		return err
	}
	r.notify(r.oid(g))
	return nil
}

// checkEpoch returns an error matching ErrHolderSince if the group's
// record, or its copy on the records object, has an epoch of at least
// epoch (see Acquire). The caller holds the lock: no record is written
// meanwhile.
func (r *RADOS) checkEpoch(g uint32, epoch uint64) error {
	oid, mo := r.oid(g), RecordsObjectName(r.o.GroupName)
	for _, src := range []struct{ oid, key string }{{oid, keyHolder}, {mo, mirrorKey(g)}} {
		vals, err := r.ioctx.GetOmapValues(src.oid, "", src.key, 16)
		if err != nil && errnoOf(err) != syscall.ENOENT {
			return fmt.Errorf("read the record of %s before writing ours: %w", src.oid, classify(err))
		}
		b, ok := vals[src.key]
		if !ok {
			continue
		}
		var have Record
		if err := json.Unmarshal(b, &have); err != nil {
			return fmt.Errorf("record of %s: %w", src.oid, err)
		}
		if have.Epoch >= epoch {
			return fmt.Errorf("acquire %s at epoch %d: %w (%s, session %s, epoch %d): %w", oid, epoch, ErrHolderSince,
				have.Name, have.Session, have.Epoch, ErrLockBusy)
		}
	}
	return nil
}

// Renew renews the lock (must-renew: ErrLockBusy if it is no longer this
// session's), rewrites the record if the addresses changed, and returns
// the handover request.
func (r *RADOS) Renew(g uint32, rec Record) (string, error) {
	if err := r.lock(g, rec, lockMustRenew); err != nil {
		return "", err
	}
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	same := r.written[g] == string(b)
	r.mu.Unlock()
	if !same {
		if err := r.writeRecord(g, rec, false); err != nil {
			return "", err
		}
	}
	vals, err := r.ioctx.GetOmapValues(r.oid(g), "", keyRequest, 1)
	if err != nil {
		return "", fmt.Errorf("read the handover request of %s: %w", r.oid(g), classify(err))
	}
	return string(vals[keyRequest]), nil
}

// blocklistCmd is the monitor command that blocklists addr for expire.
// The monitor's "expire" is a CephFloat: it is sent as a JSON number with
// a fraction, since an integer would not decode as a double.
func blocklistCmd(addr string, expire time.Duration) []byte {
	a, _ := json.Marshal(addr)
	return fmt.Appendf(nil, `{"prefix":"osd blocklist","blocklistop":"add","addr":%s,"expire":%.1f}`, a, math.Floor(expire.Seconds()))
}

// Fence blocklists every client address of every vector for the
// blocklist expiry (RADOSOptions.BlocklistExpire: years, never the
// monitor's default hour, after which a fenced client that was frozen
// would write again), then waits until this client has the OSD map with
// the entries (as librbd does when it breaks a lock).
//
// It lists the blocklist first (`osd blocklist ls`, a read of the
// monitor's committed OSD map, no commit; "profile rbd" allows it, as
// it allows reading the OSD map) and adds only the entries that
// are not there for at least half the expiry (ToBlocklist): each add is a
// Paxos commit of a new OSD map, seconds on a loaded cluster, and the
// clients of a group are often fenced already (the previous holder's by
// an earlier fence, this gateway's own old ones by the successor that
// took the group from it). An entry an operator removed, or one that
// lapses sooner, is added again: its client may still write. The v1 and
// v2 addresses of a client are one entry (BlocklistEntry).
func (r *RADOS) Fence(vecs []string) error {
	expire := r.o.BlocklistExpire
	if expire <= 0 {
		expire = DefaultBlocklistExpire
	}
	// The listing only saves commits: if it fails (or cannot be read),
	// every entry is added, as before it existed. A fenced gateway's
	// ErrFenced still shows at the adds.
	var have map[string]time.Time
	if out, _, err := r.conn.MonCommand([]byte(`{"prefix":"osd blocklist ls","format":"json"}`)); err == nil {
		have, _ = ParseBlocklist(out)
	}
	for _, e := range ToBlocklist(vecs, have, time.Now().Add(expire/2)) {
		if _, status, err := r.conn.MonCommand(blocklistCmd(e, expire)); err != nil {
			return fmt.Errorf("osd blocklist add %s: %w (%s)", e, classify(err), status)
		}
		r.mu.Lock()
		r.blocklistAdds++
		r.mu.Unlock()
	}
	if err := r.conn.WaitForLatestOSDMap(); err != nil {
		return fmt.Errorf("wait for the OSD map with the blocklist: %w", classify(err))
	}
	return nil
}

// BlocklistAdds returns the number of blocklist entries this client's
// fences added (`osd blocklist add` commands that succeeded).
func (r *RADOS) BlocklistAdds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocklistAdds
}

// Release writes rec (released) and unlocks.
func (r *RADOS) Release(g uint32, rec Record) error {
	if err := r.writeRecord(g, rec, false); err != nil {
		return err
	}
	ret, err := r.ioctx.Unlock(r.oid(g), LockName, rec.Session)
	switch {
	case err != nil:
		return fmt.Errorf("unlock %s: %w", r.oid(g), classify(err))
	case ret == -int(syscall.ENOENT):
		return fmt.Errorf("unlock %s: %w (not held by this session)", r.oid(g), ErrLockBusy)
	}
	r.notify(r.oid(g))
	return nil
}

// RequestHandover writes name as the handover request and notifies.
func (r *RADOS) RequestHandover(g uint32, name string) error {
	if err := r.ioctx.SetOmap(r.oid(g), map[string][]byte{keyRequest: []byte(name)}); err != nil {
		return fmt.Errorf("write the handover request on %s: %w", r.oid(g), classify(err))
	}
	r.notify(r.oid(g))
	return nil
}

// CheckConfig stores canonical on the config object if it has none (an
// exclusive create: the first gateway's wins), then compares.
func (r *RADOS) CheckConfig(canonical string) (bool, string, error) {
	oid := ConfigObjectName(r.o.GroupName)
	op := rados.CreateWriteOp()
	op.Create(rados.CreateExclusive)
	op.SetOmap(map[string][]byte{keyConfig: []byte(canonical)})
	err := op.Operate(r.ioctx, oid, rados.OperationNoFlag)
	op.Release()
	if err != nil && errnoOf(err) != syscall.EEXIST {
		return false, "", fmt.Errorf("store the group configuration in %s: %w", oid, classify(err))
	}
	vals, err := r.ioctx.GetOmapValues(oid, "", keyConfig, 1)
	if err != nil {
		return false, "", fmt.Errorf("read the group configuration in %s: %w", oid, classify(err))
	}
	stored := string(vals[keyConfig])
	if stored != canonical {
		return false, ConfigDiff(canonical, stored) + " (object " + oid + " in pool " + r.o.Pool + ")", nil
	}
	r.mu.Lock()
	me := r.o.Member
	r.mu.Unlock()
	if me == nil {
		return true, "", nil
	}
	conflicts, err := r.checkMember(oid, *me)
	if err != nil {
		return false, "", err
	}
	if len(conflicts) > 0 {
		return false, strings.Join(conflicts, "; ") + " (object " + oid + " in pool " + r.o.Pool + ")", nil
	}
	return true, "", nil
}

// maxMembers bounds the member entries read from the config object.
const maxMembers = 1024

// checkMember compares this gateway's member entry with the others on
// the config object; if none conflicts, it records its own, then reads
// them again: a member that recorded a conflicting entry at the same time
// is seen by one of the two reads of each (both then refuse, and this one
// removes its entry).
func (r *RADOS) checkMember(oid string, me Member) ([]string, error) {
	key := MemberKeyPrefix + me.Name
	read := func() (map[string]string, error) {
		vals, err := r.ioctx.GetOmapValues(oid, "", MemberKeyPrefix, maxMembers)
		if err != nil {
			return nil, fmt.Errorf("read the group's members in %s: %w", oid, classify(err))
		}
		out := make(map[string]string, len(vals))
		for k, v := range vals {
			out[strings.TrimPrefix(k, MemberKeyPrefix)] = string(v)
		}
		return out, nil
	}
	entries, err := read()
	if err != nil {
		return nil, err
	}
	if c := MemberConflicts(me, entries); len(c) > 0 {
		return c, nil
	}
	mine := me.Encode()
	if entries[me.Name] != mine {
		if err := r.ioctx.SetOmap(oid, map[string][]byte{key: []byte(mine)}); err != nil {
			return nil, fmt.Errorf("record this gateway's member entry in %s: %w", oid, classify(err))
		}
	}
	if entries, err = read(); err != nil {
		return nil, err
	}
	c := MemberConflicts(me, entries)
	if len(c) > 0 && entries[me.Name] == mine {
		if err := r.ioctx.RmOmapKeys(oid, []string{key}); err != nil {
			c = append(c, fmt.Sprintf("could not remove this gateway's entry %s: %v", key, classify(err)))
		}
	}
	return c, nil
}

// ConfigChanged is signalled after the config object was notified (with
// RADOSOptions.WatchConfig): a new version may be stored.
func (r *RADOS) ConfigChanged() <-chan struct{} { return r.configChanged }

// readStored reads the config object: its version (data), its
// configuration and the members' running versions.
func (r *RADOS) readStored(oid string) (StoredConfig, bool, error) {
	var sc StoredConfig
	buf := make([]byte, versionLen+1)
	n, err := r.ioctx.Read(oid, buf, 0)
	if err != nil {
		if errnoOf(err) == syscall.ENOENT {
			return sc, false, nil
		}
		return sc, false, fmt.Errorf("read the group configuration's version in %s: %w", oid, classify(err))
	}
	if sc.Version, err = DecodeVersion(buf[:n]); err != nil {
		return sc, true, fmt.Errorf("%s: %w", oid, err)
	}
	vals, err := r.ioctx.GetOmapValues(oid, "", keyGroupConfig, 1)
	if err != nil {
		return sc, true, fmt.Errorf("read the group configuration in %s: %w", oid, classify(err))
	}
	sc.Config = vals[keyGroupConfig]
	run, err := r.ioctx.GetOmapValues(oid, "", RunningKeyPrefix, maxMembers)
	if err != nil {
		return sc, true, fmt.Errorf("read the members' running versions in %s: %w", oid, classify(err))
	}
	sc.Running = ParseRunning(run)
	return sc, true, nil
}

// ReadGroupConfig reads the group's stored configuration (version 0 and
// no text if none is stored).
func (r *RADOS) ReadGroupConfig() (StoredConfig, error) {
	sc, _, err := r.readStored(ConfigObjectName(r.o.GroupName))
	return sc, err
}

// LoadGroupConfig returns the group's stored configuration, storing seed
// as version 1 if there is none. canonical is the agreement text of a
// group whose configuration is in RADOS (what the members' files must
// still agree on: the lease and the ANA groups, see CheckConfig); legacy
// is this gateway's agreement text as a gateway keeping the configuration
// in its file writes it. A config object with an unversioned
// configuration equal to legacy (a group of such gateways) is moved to
// version 1 with seed; one that differs is refused (ErrLegacyConfig,
// with the difference).
func (r *RADOS) LoadGroupConfig(seed []byte, canonical, legacy string) (StoredConfig, error) {
	oid := ConfigObjectName(r.o.GroupName)
	first := map[string][]byte{keyGroupConfig: seed, keyVersion: []byte("1"), keyConfig: []byte(canonical)}
	op := rados.CreateWriteOp()
	op.Create(rados.CreateExclusive)
	op.WriteFull(EncodeVersion(1))
	op.SetOmap(first)
	err := op.Operate(r.ioctx, oid, rados.OperationNoFlag)
	op.Release()
	switch {
	case err == nil:
		r.notify(oid)
	case errnoOf(err) != syscall.EEXIST:
		return StoredConfig{}, fmt.Errorf("store the group configuration in %s: %w", oid, classify(err))
	}
	for try := 0; try < 3; try++ {
		sc, _, err := r.readStored(oid)
		if err != nil || sc.Version > 0 {
			return sc, err
		}
		// Created without a version: by a gateway keeping the group's
		// configuration in its file (CheckConfig), or by DialRADOS's
		// watch just now (no omap).
		vals, err := r.ioctx.GetOmapValues(oid, "", keyConfig, 1)
		if err != nil {
			return sc, fmt.Errorf("read the group configuration in %s: %w", oid, classify(err))
		}
		if stored, ok := vals[keyConfig]; ok && string(stored) != legacy {
			return sc, fmt.Errorf("%w: %s (object %s in pool %s)", ErrLegacyConfig, ConfigDiff(legacy, string(stored)), oid, r.o.Pool)
		}
		// Version 1, if the object still has no data (a compare of the
		// first bytes with zeros: the OSD reads past the end as zeros).
		op := rados.CreateWriteOp()
		cmp := op.CmpExt(make([]byte, versionLen), 0)
		op.WriteFull(EncodeVersion(1))
		op.SetOmap(first)
		err = op.Operate(r.ioctx, oid, rados.OperationNoFlag)
		res := cmp.Result
		op.Release()
		if err == nil && res == 0 {
			r.notify(oid)
			continue
		}
		if err != nil && res == 0 && !isCmpExtMismatch(err) {
			return sc, fmt.Errorf("store the group configuration in %s: %w", oid, classify(err))
		}
		// Another gateway stored a version first: read it.
	}
	return StoredConfig{}, fmt.Errorf("store the group configuration in %s: it changed during each of 3 attempts", oid)
}

// isCmpExtMismatch reports whether err is a cmpext that found other bytes:
// the OSD answers -MAX_ERRNO - offset (librados, rados_write_op_cmpext).
func isCmpExtMismatch(err error) bool {
	var ce interface{ ErrorCode() int }
	return errors.As(err, &ce) && ce.ErrorCode() <= -4095
}

// WriteGroupConfig stores cfg as the version after base in one RADOS
// operation that first compares the object's version with base (cmpext):
// if another change was stored since, the OSD applies nothing and the
// error is a *VersionConflictError with the current version. It then
// notifies the members and returns the new version. A non-empty agreement
// replaces the agreement text (omap key config) in the same operation: a
// version that changes an ANA group's preferred owner changes what every
// member's start compares (CheckConfig).
func (r *RADOS) WriteGroupConfig(base uint64, cfg []byte, agreement string) (uint64, error) {
	oid := ConfigObjectName(r.o.GroupName)
	next := base + 1
	op := rados.CreateWriteOp()
	cmp := op.CmpExt(EncodeVersion(base), 0)
	op.WriteFull(EncodeVersion(next))
	kv := map[string][]byte{keyGroupConfig: cfg, keyVersion: []byte(strconv.FormatUint(next, 10))}
	if agreement != "" {
		kv[keyConfig] = []byte(agreement)
	}
	op.SetOmap(kv)
	err := op.Operate(r.ioctx, oid, rados.OperationNoFlag)
	res := cmp.Result
	op.Release()
	if err != nil || res != 0 {
		if res != 0 || isCmpExtMismatch(err) {
			sc, rerr := r.ReadGroupConfig()
			if rerr != nil {
				return 0, fmt.Errorf("%w (and reading the current version: %w)", &VersionConflictError{Base: base}, rerr)
			}
			return 0, &VersionConflictError{Base: base, Current: sc.Version}
		}
		return 0, fmt.Errorf("store version %d of the group configuration in %s: %w", next, oid, classify(err))
	}
	r.notify(oid)
	return next, nil
}

// SetRunning records that member name runs version v (omap key
// running.<name>), and notifies.
func (r *RADOS) SetRunning(name string, v uint64) error {
	oid := ConfigObjectName(r.o.GroupName)
	if err := r.ioctx.SetOmap(oid, map[string][]byte{RunningKeyPrefix + name: []byte(strconv.FormatUint(v, 10))}); err != nil {
		return fmt.Errorf("record the running version of %s in %s: %w", name, oid, classify(err))
	}
	return nil
}

// Members reads the members' entries of the config object (entries that do
// not parse are errors).
func (r *RADOS) Members() ([]Member, error) {
	oid := ConfigObjectName(r.o.GroupName)
	vals, err := r.ioctx.GetOmapValues(oid, "", MemberKeyPrefix, maxMembers)
	if err != nil {
		return nil, fmt.Errorf("read the group's members in %s: %w", oid, classify(err))
	}
	var out []Member
	for k, v := range vals {
		m, err := ParseMember(strings.TrimPrefix(k, MemberKeyPrefix), string(v))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// SetMember sets what CheckConfig records as this gateway's member entry
// (a gateway that holds the group's configuration in RADOS knows it only
// once it read the configuration, after DialRADOS).
func (r *RADOS) SetMember(m *Member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.Member = m
}

// SetPorts records this member's ports (omap key ports.<name>) on the
// config object and notifies the members, whose discovery logs list them.
// It does not create the object (false, nil while there is none: the
// group's configuration is stored first, by CheckConfig or
// LoadGroupConfig, which must find the object absent or theirs).
func (r *RADOS) SetPorts(name string, ports []Port) (bool, error) {
	oid := ConfigObjectName(r.o.GroupName)
	op := rados.CreateWriteOp()
	op.AssertExists()
	op.SetOmap(map[string][]byte{PortsKeyPrefix + name: []byte(EncodePorts(ports))})
	err := op.Operate(r.ioctx, oid, rados.OperationNoFlag)
	op.Release()
	switch {
	case errnoOf(err) == syscall.ENOENT:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record the ports of %s in %s: %w", name, oid, classify(err))
	}
	r.notify(oid)
	return true, nil
}

// RemovePorts removes member name's ports from the config object (a clean
// stop) and notifies the members.
func (r *RADOS) RemovePorts(name string) error {
	oid := ConfigObjectName(r.o.GroupName)
	op := rados.CreateWriteOp()
	op.AssertExists()
	op.RmOmapKeys([]string{PortsKeyPrefix + name})
	err := op.Operate(r.ioctx, oid, rados.OperationNoFlag)
	op.Release()
	switch {
	case errnoOf(err) == syscall.ENOENT:
		return nil
	case err != nil:
		return fmt.Errorf("remove the ports of %s from %s: %w", name, oid, classify(err))
	}
	r.notify(oid)
	return nil
}

// GroupPorts reads every member's ports (member name → ports). An entry
// that does not parse is left out and reported in bad (one line each):
// the others are still listed.
func (r *RADOS) GroupPorts() (ports map[string][]Port, bad []string, err error) {
	oid := ConfigObjectName(r.o.GroupName)
	vals, err := r.ioctx.GetOmapValues(oid, "", PortsKeyPrefix, maxMembers)
	if err != nil {
		return nil, nil, fmt.Errorf("read the members' ports in %s: %w", oid, classify(err))
	}
	ports = make(map[string][]Port, len(vals))
	for k, v := range vals {
		name := strings.TrimPrefix(k, PortsKeyPrefix)
		p, err := ParsePorts(name, string(v))
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		ports[name] = p
	}
	slices.Sort(bad)
	return ports, bad, nil
}

// selfName is this gateway's name as a member ("" without a member entry).
func (r *RADOS) selfName() string {
	if r.o.Member == nil {
		return ""
	}
	return r.o.Member.Name
}

// AliveMembers probes the members' liveness: one notification of the
// group's config object, which every member watches (from its start to
// its clean stop; the OSD drops the watch of a client that stops pinging
// it after osd_client_watch_timeout), each watch answering with its
// member's name within timeout. A member is alive when its process runs,
// reaches the cluster and reads its watch: a crashed, frozen or cut-off
// gateway does not answer, even while the OSD still lists its watch
// (rados listwatchers). The call takes at most timeout (plus the OSD
// operation's own bound) when a watch is silent.
func (r *RADOS) AliveMembers(timeout time.Duration) (Liveness, error) {
	oid := ConfigObjectName(r.o.GroupName)
	acks, timeouts, err := r.ioctx.NotifyWithTimeout(oid, []byte(aliveProbe), timeout)
	var l Liveness
	if err != nil && errnoOf(err) != syscall.ETIMEDOUT {
		return l, fmt.Errorf("gateway: probe the members' watches of %s: %w", oid, classify(err))
	}
	for _, a := range acks {
		if len(a.Response) == 0 {
			l.Unnamed++
			continue
		}
		l.Alive = append(l.Alive, string(a.Response))
	}
	slices.Sort(l.Alive)
	l.Alive = slices.Compact(l.Alive)
	l.Silent = len(timeouts)
	return l, nil
}
