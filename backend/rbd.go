//go:build rbd

package backend

/*
#cgo LDFLAGS: -lrbd
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <rbd/librbd.h>

// nvmetd_rbd_conf copies the value of librbd option name as the image
// sees it (rbd_config_image_list: the client's configuration overridden by
// the pool's and the image's conf_ metadata) into out, and its source. It
// returns 1 if found, 0 if librbd has no such option, or a negative errno.
static int nvmetd_rbd_conf(rbd_image_t img, const char *name, char *out, size_t outlen, int *source) {
	int n = 0;
	int r = rbd_config_image_list(img, NULL, &n);
	if (r < 0 && r != -ERANGE)
		return r;
	rbd_config_option_t *opts = calloc(n > 0 ? n : 1, sizeof(*opts));
	if (opts == NULL)
		return -ENOMEM;
	r = rbd_config_image_list(img, opts, &n);
	if (r < 0) {
		free(opts);
		return r;
	}
	int found = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(opts[i].name, name) == 0) {
			strncpy(out, opts[i].value, outlen - 1);
			out[outlen - 1] = 0;
			*source = opts[i].source;
			found = 1;
			break;
		}
	}
	rbd_config_image_list_cleanup(opts, n);
	free(opts);
	return found;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
)

// RBD is a backend on a Ceph RBD image, through librbd (go-ceph), with a
// RADOS client connection of its own. It exists only in builds with the rbd
// tag ([RBDBuildTag]).
//
// Data path. The target starts reads and writes with StartReadAt and
// StartWriteAt ([AsyncIO]): rbd_aio_read and rbd_aio_write on the caller's
// buffer (pinned while librbd holds it; no copy), with completions that
// have no callback: librbd queues them and signals an eventfd
// (rbd_set_image_notification), which one goroutine reads through the
// runtime's netpoller and drains with rbd_poll_io_events, completing each
// command from there. So no OS thread waits per operation and there is no
// hand-off to a worker; at most rbdMaxAIO operations are in flight per
// image, beyond which a start is refused and the target runs the command
// on a worker with the synchronous calls. ReadAt and WriteAt are those:
// rbd_read and rbd_write through go-ceph, on the caller's buffer. Both
// paths use the same image handle (go-ceph's, whose rbd_image_t the
// asynchronous path reads from the go-ceph Image), so librbd's exclusive
// lock stays with one owner. librbd's own cache is turned off
// (rbd_cache=false), so a completed write is on the OSDs (acknowledged by
// every replica), FUA or not, and nothing acknowledged lives only in this
// process: another gateway can take the image over. Flush is rbd_flush all
// the same (on a worker, as WriteZeroes and Discard).
//
// Claim. [Open] claims the image in this process (one backend per image,
// by cluster fsid, pool id, RADOS namespace and image id: ErrBusy
// otherwise; Config.DeferClaim and Claim as for files). Across processes
// writes hold librbd's exclusive lock, taken with rbd_lock_acquire in
// exclusive mode, in which librbd never hands it over on request: another
// client's writes fail with ErrUnavailable until the holder releases it
// (SetWritable(false), Close) or is blocklisted ([WriteLocker]). The pool's
// and the image's configuration must not turn a write-back cache on
// (rbd_cache, the persistent cache): such an image is refused at open.
//
// Zeroing. WriteZeroes is rbd_writesame with a block of zeroes, which
// librbd turns into a zeroing discard (rbd_discard_on_zeroed_write_same,
// set here): whole objects are removed, partial ones truncated or zeroed,
// and the range reads as zeroes afterwards, as NVMe Write Zeroes requires,
// whether or not deallocation was asked for. Discard is rbd_discard, which
// is advisory: librbd skips pieces smaller than rbd_discard_granularity_bytes
// (64 KiB by default), so Info().DiscardZeroes is false.
//
// Size. The capacity is the image's size rounded down to the block size. A
// header watch (rbd_update_watch) notices `rbd resize` while the image is
// open: Size then follows, and SizeChanged ([SizeNotifier]) tells the
// target. A write past the new end of a shrunk image fails with
// ErrOutOfRange even before the notice (it takes the exclusive lock, which
// refreshes the header); a read in that window may return zeroes past the
// new end.
//
// Failures. Every cluster operation is bounded by OpTimeout
// (rados_osd_op_timeout, rados_mon_op_timeout) and connecting by
// ConnectTimeout (client_mount_timeout). An operation that times out, or
// fails because the client lost the cluster or was blocklisted, returns an
// error matching [ErrUnavailable] (and ErrClosed), which the target answers
// with a path error so that hosts retry on another path. Measured with the
// cluster stopped (TestRBDClusterStopped, docs/rbd.md): each data call
// fails after OpTimeout, and Close returns after three of them.
// Other librbd errors are *[IOError]s wrapping the errno (ENOSPC and EDQUOT
// match syscall.ENOSPC); EROFS matches ErrReadOnly.
type RBD struct {
	spec   string // pool/[namespace/]image
	pool   string
	bs     uint32
	ro     bool
	info   Info
	client CephClientInfo

	// mu is read-held by every call that uses image and write-held by
	// Close, so the image is never closed under a call.
	mu     sync.RWMutex
	closed bool
	conn   *rados.Conn
	ioctx  *rados.IOContext
	image  *rbd.Image
	watch  *rbd.Watch
	aio    *rbdAsync // the asynchronous path ([AsyncIO]); nil without one

	opTimeout time.Duration

	// The claim on the image (see Claim, [WriteLocker]). claimKey keys
	// this process's claim (rbdClaims); claimed is set while it is held
	// (unset only between an open with DeferClaim and Claim). exclusive:
	// the image has the exclusive-lock feature. writable and lockHeld are
	// changed under lockMu; the write path reads them without it.
	claimKey  string
	claimed   atomic.Bool
	inProcess bool // the claim in rbdClaims is ours (under lockMu)
	exclusive bool
	lockMu    sync.Mutex
	writable  atomic.Bool
	lockHeld  atomic.Bool
	lockErr   error     // the last failure to take the lock
	lockTried time.Time // when it failed

	size    atomic.Int64  // the image size rounded down to bs
	sizeMu  sync.Mutex    // serialises size refreshes
	changed chan struct{} // SizeChanged: capacity 1
	wake    chan struct{} // header watch → refresher: capacity 1
	stop    chan struct{} // closed by Close: ends the refresher
	done    chan struct{} // closed when the refresher has returned
}

var (
	_ Backend      = (*RBD)(nil)
	_ SizeNotifier = (*RBD)(nil)
	_ CephClient   = (*RBD)(nil)
	_ AsyncIO      = (*RBD)(nil)
	_ Claimer      = (*RBD)(nil)
	_ WriteLocker  = (*RBD)(nil)
)

// rbdClaims are the images open in this process, by cluster fsid, pool
// id, RADOS namespace and image id (what Info().ID holds): one image is
// one namespace, as one file is (its flock), whatever its name or the
// ceph.conf it was reached through. The librbd exclusive lock keeps
// other processes out; this keeps a second backend of this process out,
// which would be a second RADOS client and so a second lock owner.
var rbdClaims = struct {
	mu sync.Mutex
	m  map[string]string // key → the spec of the holder
}{m: map[string]string{}}

// claimImage takes this process's claim on key.
func claimImage(key, spec string) error {
	rbdClaims.mu.Lock()
	defer rbdClaims.mu.Unlock()
	if holder, ok := rbdClaims.m[key]; ok {
		return fmt.Errorf("backend rbd %s: the image is already open in this process (as %s): %w", spec, holder, ErrBusy)
	}
	rbdClaims.m[key] = spec
	return nil
}

// unclaimImage releases it.
func unclaimImage(key string) {
	rbdClaims.mu.Lock()
	delete(rbdClaims.m, key)
	rbdClaims.mu.Unlock()
}

// rbdLockRetry is how long a failure to take the exclusive lock is
// returned to writes before the next one tries again.
const rbdLockRetry = time.Second

// rbdZeroes is the block WriteZeroes repeats (rbd_writesame).
var rbdZeroes [4096]byte

// maxWriteSame is the largest length of one rbd_writesame call (librbd
// refuses more than INT_MAX bytes), a multiple of every block size.
const maxWriteSame = 1 << 30

// openRBD is the kind rbd case of [Open]: the image, with this process's
// claim on it (unless opts.DeferClaim).
func openRBD(opts RBDOptions) (Backend, error) {
	r, err := openRBDClaim(opts, !opts.DeferClaim)
	if err != nil {
		return nil, err
	}
	if opts.DeferClaim {
		r.claimed.Store(false)
	}
	return r, nil
}

// OpenRBD connects to the cluster and opens the image. It takes no claim
// in this process ([Open] does): two OpenRBD of one image are two RADOS
// clients, as two gateways are, and librbd's exclusive lock
// ([WriteLocker]) lets one of them write at a time.
func OpenRBD(opts RBDOptions) (*RBD, error) {
	r, err := openRBDClaim(opts, false)
	if err == nil && opts.DeferClaim {
		r.claimed.Store(false)
	}
	return r, err
}

// openRBDClaim opens the image, with this process's claim if claim.
func openRBDClaim(opts RBDOptions, claim bool) (_ *RBD, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	spec := o.Spec()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backend rbd %s: "+format, append([]any{spec}, args...)...)
	}

	conn, err := rados.NewConnWithUser(o.ClientID)
	if err != nil {
		return nil, fail("create the RADOS client: %w", err)
	}
	defer func() {
		if err != nil {
			conn.Shutdown()
		}
	}()
	if err := conn.ReadConfigFile(o.CephConf); err != nil {
		return nil, fail("read %s: %w", o.CephConf, rbdErr(err))
	}
	secs := func(d time.Duration) string {
		return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
	}
	settings := [][2]string{
		{"rados_osd_op_timeout", secs(o.OpTimeout)},
		{"rados_mon_op_timeout", secs(o.OpTimeout)},
		{"client_mount_timeout", secs(o.ConnectTimeout)},
		// No write-back cache in this process (see RBD): neither
		// librbd's in-memory cache nor the persistent write-back cache
		// (pwl_cache plugin). Pool and image conf_ metadata override
		// these; the effective values are checked after the open.
		{"rbd_cache", "false"},
		{"rbd_persistent_cache_mode", "disabled"},
		{"rbd_plugins", ""},
		// WriteZeroes relies on it (see RBD).
		{"rbd_discard_on_zeroed_write_same", "true"},
	}
	if o.Keyring != "" {
		settings = append(settings, [2]string{"keyring", o.Keyring})
	}
	for _, kv := range settings {
		if err := conn.SetConfigOption(kv[0], kv[1]); err != nil {
			return nil, fail("set %s=%s: %w", kv[0], kv[1], rbdErr(err))
		}
	}
	if err := conn.Connect(); err != nil {
		return nil, fail("connect to the cluster (%s, client.%s, within %s): %w", o.CephConf, o.ClientID, o.ConnectTimeout, rbdErr(err))
	}
	ioctx, err := conn.OpenIOContext(o.Pool)
	if err != nil {
		return nil, fail("pool %s: %w", o.Pool, rbdErr(err))
	}
	defer func() {
		if err != nil {
			ioctx.Destroy()
		}
	}()
	ioctx.SetNamespace(o.RADOSNamespace)
	var image *rbd.Image
	if o.ReadOnly {
		image, err = rbd.OpenImageReadOnly(ioctx, o.Image, rbd.NoSnapshot)
	} else {
		image, err = rbd.OpenImage(ioctx, o.Image, rbd.NoSnapshot)
	}
	if err != nil {
		return nil, fail("open the image: %w", rbdErr(err))
	}
	defer func() {
		if err != nil {
			image.Close()
		}
	}()

	n, err := image.GetSize()
	if err != nil {
		return nil, fail("size: %w", rbdErr(err))
	}
	bs := o.BlockSize
	size := int64(min(n, math.MaxInt64)) &^ int64(bs-1)
	if size < int64(bs) {
		return nil, fail("the image has %d bytes, less than one %d-byte block", n, bs)
	}
	imageID, err := image.GetId()
	if err != nil {
		return nil, fail("image id: %w", rbdErr(err))
	}
	fsid, err := conn.GetFSID()
	if err != nil {
		return nil, fail("cluster fsid: %w", rbdErr(err))
	}
	addrs, err := conn.GetAddrs()
	if err != nil {
		return nil, fail("client address: %w", rbdErr(err))
	}
	if err := checkNoCache(image, o.Pool, spec); err != nil {
		return nil, fail("%w", err)
	}
	features, err := image.GetFeatures()
	if err != nil {
		return nil, fail("features: %w", rbdErr(err))
	}

	r := &RBD{
		spec: spec, pool: o.Pool, bs: bs, ro: o.ReadOnly,
		conn: conn, ioctx: ioctx, image: image, opTimeout: o.OpTimeout,
		changed: make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		client: CephClientInfo{
			FSID: fsid, Entity: "client." + o.ClientID, Addrs: addrs, InstanceID: conn.GetInstanceID(), Image: spec,
		},
	}
	r.exclusive = features&rbd.FeatureExclusiveLock != 0
	r.writable.Store(true)
	r.size.Store(size)
	r.info = Info{
		Kind: KindRBD,
		Path: spec,
		// The image id survives renames; the pool id survives pool renames.
		ID:        "rbd:" + fsid + "/" + strconv.FormatInt(ioctx.GetPoolID(), 10) + "/" + o.RADOSNamespace + "/" + imageID,
		Size:      size,
		BlockSize: bs,
		// As krbd: 4 KiB writes avoid read-modify-write in the OSDs'
		// allocation unit; 64 KiB is the discard granularity and krbd's
		// alloc_size, io_min and io_opt.
		PhysicalBlockSize:  max(bs, 4096),
		OptimalIOSize:      64 << 10,
		BufferAlign:        1,
		ReadOnly:           o.ReadOnly,
		Discard:            !o.ReadOnly,
		WriteZeroesOffload: true,
	}
	r.claimKey = r.info.ID
	r.claimed.Store(true)
	if claim {
		if err := claimImage(r.claimKey, spec); err != nil {
			return nil, err
		}
		r.inProcess = true
		defer func() {
			if err != nil {
				unclaimImage(r.claimKey)
			}
		}()
	}
	// The header watch: librbd calls back (on its own thread) after the
	// image header changed, e.g. after a resize; the refresher goroutine
	// reads the new size outside the callback.
	r.watch, err = image.UpdateWatch(func(any) {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}, nil)
	if err != nil {
		return nil, fail("watch the image header: %w", rbdErr(err))
	}
	r.aio, err = newRBDAsync(image, r.aioDone)
	if err != nil {
		_ = r.watch.Unwatch()
		return nil, fail("asynchronous I/O: %w", err)
	}
	go r.refresher()
	return r, nil
}

// refresher re-reads the size after each header notification.
func (r *RBD) refresher() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
			if r.acquire() != nil {
				return
			}
			r.refreshSize()
			r.release()
		}
	}
}

// refreshSize reads the image size; if it changed it stores it and notifies
// SizeChanged. The caller holds the guard. Errors (the cluster unreachable)
// leave the size as it was: the next notification or I/O error retries.
func (r *RBD) refreshSize() {
	r.sizeMu.Lock()
	defer r.sizeMu.Unlock()
	n, err := r.image.GetSize()
	if err != nil || n > math.MaxInt64 {
		return
	}
	size := int64(n) &^ int64(r.bs-1)
	if r.size.Swap(size) != size {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// acquire read-locks the image for one call; release undoes it.
func (r *RBD) acquire() error {
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (r *RBD) release() { r.mu.RUnlock() }

// acquireWrite is acquire for calls that modify data: it also checks the
// claim and holds (or takes) the exclusive lock ([WriteLocker]).
func (r *RBD) acquireWrite() error {
	if err := r.acquire(); err != nil {
		return err
	}
	if r.ro {
		r.release()
		return ErrReadOnly
	}
	if r.lockHeld.Load() || (!r.exclusive && r.claimed.Load() && r.writable.Load()) {
		return nil
	}
	if err := r.writeGate(); err != nil {
		r.release()
		return err
	}
	return nil
}

// writeGate is acquireWrite's slow path: writes refused, or the lock to
// take. The caller holds the guard.
func (r *RBD) writeGate() error {
	r.lockMu.Lock()
	defer r.lockMu.Unlock()
	if !r.claimed.Load() {
		if err := r.claimLocked(); err != nil {
			if errors.Is(err, ErrBusy) {
				return fmt.Errorf("backend rbd %s: write before the claim (the namespace's previous backend still holds the image): %w", r.spec, ErrUnavailable)
			}
			return err
		}
	}
	switch {
	case !r.writable.Load():
		return fmt.Errorf("backend rbd %s: writes are not allowed here (the namespace's ANA group is not served optimized by this target): %w", r.spec, ErrUnavailable)
	case !r.exclusive || r.lockHeld.Load():
		return nil
	case r.lockErr != nil && time.Since(r.lockTried) < rbdLockRetry:
		return r.lockErr
	}
	return r.takeLock()
}

// takeLock takes the exclusive lock with rbd_lock_acquire; lockMu and the
// guard are held. librbd breaks a holder's lock when that holder is gone
// (its watch dropped: dead, or blocklisted by a gateway's fence) and
// refuses (EROFS) while a live client holds it in that mode.
func (r *RBD) takeLock() error {
	// The image's configuration may have changed since the open (`rbd
	// config image set` refreshes it in librbd): no lock, so no writes,
	// if it would now cache.
	if err := checkNoCache(r.image, r.pool, r.spec); err != nil {
		r.lockErr = fmt.Errorf("backend rbd %s: %w: %w", r.spec, err, ErrUnavailable)
		r.lockTried = time.Now()
		return r.lockErr
	}
	err := r.image.LockAcquire(rbd.LockModeExclusive)
	if err == nil {
		r.lockHeld.Store(true)
		r.lockErr = nil
		return nil
	}
	holder := "another client"
	if owners, oerr := r.image.LockGetOwners(); oerr == nil && len(owners) > 0 {
		holder = "client " + owners[0].Owner
	}
	errno := rbdErrno(err)
	if errno == syscall.EROFS || errno == syscall.EBUSY {
		err = fmt.Errorf("the image's exclusive lock is held by %s (rbd status %s; rbd lock ls): %w: %w", holder, r.spec, ErrUnavailable, errno)
	} else {
		err = fmt.Errorf("take the image's exclusive lock: %w", rbdErr(err))
	}
	r.lockErr = fmt.Errorf("backend rbd %s: %w", r.spec, err)
	r.lockTried = time.Now()
	if !errors.Is(r.lockErr, ErrUnavailable) {
		r.lockErr = fmt.Errorf("%w: %w", r.lockErr, ErrUnavailable)
	}
	return r.lockErr
}

// SetWritable allows or refuses writes and takes or releases the image's
// exclusive lock. See [WriteLocker].
func (r *RBD) SetWritable(writable bool) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	r.lockMu.Lock()
	defer r.lockMu.Unlock()
	r.writable.Store(writable)
	if r.ro || !r.exclusive {
		return nil
	}
	if !writable {
		if !r.lockHeld.Swap(false) {
			return nil
		}
		// librbd blocks new writes and waits for those in flight before it
		// releases the lock.
		if err := r.image.LockRelease(); err != nil {
			return fmt.Errorf("backend rbd %s: release the exclusive lock: %w", r.spec, rbdErr(err))
		}
		return nil
	}
	if !r.claimed.Load() || r.lockHeld.Load() {
		return nil
	}
	return r.takeLock()
}

// WriteLockErr reports whether writes are protected by the exclusive
// lock. See [WriteLocker].
func (r *RBD) WriteLockErr() error {
	if r.ro || r.exclusive {
		return nil
	}
	return fmt.Errorf("backend rbd %s: %w: a second client could write it at the same time; enable it with `rbd feature enable %s exclusive-lock`",
		r.spec, ErrNoExclusiveLock, r.spec)
}

// Claim takes this process's claim on the image, which an open with
// DeferClaim left out, and the exclusive lock if writes are allowed; until
// then writes fail with ErrUnavailable (each write tries to claim: a
// previous backend that closes late, after a slow drain, hands the image
// over at the next write). It fails with ErrBusy if another backend of
// this process has the image. See [Claimer].
func (r *RBD) Claim() error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	r.lockMu.Lock()
	defer r.lockMu.Unlock()
	return r.claimLocked()
}

// claimLocked is Claim with lockMu and the guard held.
func (r *RBD) claimLocked() error {
	if r.claimed.Load() {
		return nil
	}
	if err := claimImage(r.claimKey, r.spec); err != nil {
		return err
	}
	r.inProcess = true
	r.claimed.Store(true)
	if r.ro || !r.exclusive || !r.writable.Load() {
		return nil
	}
	return r.takeLock()
}

// checkNoCache checks that librbd does not cache writes for this image
// with the configuration it has after the open: rbd_cache off and no
// persistent write-back cache. The client sets both off, but the pool's
// and the image's conf_ metadata (`rbd config pool|image set`) override
// the client's configuration.
func checkNoCache(image *rbd.Image, pool, spec string) error {
	h := imageHandle(image)
	if h == nil {
		return errors.New("check the cache settings: no image handle")
	}
	get := func(name string) (string, string, bool, error) {
		var buf [256]C.char
		var src C.int
		cname := C.CString(name)
		defer C.free(unsafe.Pointer(cname))
		r := C.nvmetd_rbd_conf(C.rbd_image_t(h), cname, &buf[0], C.size_t(len(buf)), &src)
		if r < 0 {
			return "", "", false, fmt.Errorf("read the image's configuration (rbd_config_image_list): %w", syscall.Errno(-r))
		}
		where := "the client's configuration"
		switch src {
		case C.RBD_CONFIG_SOURCE_POOL:
			where = fmt.Sprintf("the pool's configuration; `rbd config pool rm %s %s`", pool, name)
		case C.RBD_CONFIG_SOURCE_IMAGE:
			where = fmt.Sprintf("the image's configuration; `rbd config image rm %s %s`", spec, name)
		}
		return C.GoString(&buf[0]), where, r == 1, nil
	}
	refuse := func(name, value, where string) error {
		return fmt.Errorf("librbd would cache writes in this process: %s=%s (set by %s): an acknowledged write could then live only in this gateway", name, value, where)
	}
	v, where, ok, err := get("rbd_cache")
	if err != nil {
		return err
	}
	if ok && v != "false" {
		return refuse("rbd_cache", v, where)
	}
	v, where, ok, err = get("rbd_persistent_cache_mode")
	if err != nil {
		return err
	}
	if ok && v != "disabled" && v != "" {
		return refuse("rbd_persistent_cache_mode", v, where)
	}
	v, where, ok, err = get("rbd_plugins")
	if err != nil {
		return err
	}
	if ok && strings.Contains(v, "pwl_cache") {
		return refuse("rbd_plugins", v, where)
	}
	return nil
}

// ReadAt reads len(p) bytes at off with rbd_read into p. See [Backend].
func (r *RBD) ReadAt(p []byte, off int64) error {
	if err := CheckRange(OpRead, off, int64(len(p)), r.size.Load(), r.bs); err != nil {
		return err
	}
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	if len(p) == 0 {
		return nil
	}
	n, err := r.image.ReadAt(p, off)
	if err != nil || n != len(p) {
		return r.fail(OpRead, off, int64(len(p)), n, err)
	}
	return nil
}

// WriteAt writes p at off with rbd_write. Writes are durable when they
// complete (no librbd cache), so fua needs nothing more. See [Backend].
func (r *RBD) WriteAt(p []byte, off int64, fua bool) error {
	if err := CheckRange(OpWrite, off, int64(len(p)), r.size.Load(), r.bs); err != nil {
		return err
	}
	if err := r.acquireWrite(); err != nil {
		return err
	}
	defer r.release()
	if len(p) == 0 {
		return nil
	}
	n, err := r.image.WriteAt(p, off)
	if err != nil || n != len(p) {
		return r.fail(OpWrite, off, int64(len(p)), n, err)
	}
	return nil
}

// StartReadAt starts rbd_aio_read of len(p) bytes at off into p. See
// [AsyncIO].
func (r *RBD) StartReadAt(p []byte, off int64, c Completion) bool {
	return r.startAIO(OpRead, p, off, c)
}

// StartWriteAt starts rbd_aio_write of p at off. Writes are durable when
// they complete (no librbd cache), so fua needs nothing more. See
// [AsyncIO].
func (r *RBD) StartWriteAt(p []byte, off int64, fua bool, c Completion) bool {
	return r.startAIO(OpWrite, p, off, c)
}

// startAIO starts a read or a write on the asynchronous path; false when
// every slot is taken (or there is no such path), and for a write while the
// exclusive lock is not held: taking it is a cluster operation (a second
// or so when the holder was fenced: librbd blocklists it again and waits
// for the OSD map), which must not block the caller (the queue's
// goroutine, whose reads go on meanwhile), so the write goes the
// synchronous way, on a worker.
func (r *RBD) startAIO(op Op, p []byte, off int64, c Completion) bool {
	if r.aio == nil {
		return false
	}
	if op == OpWrite && r.exclusive && !r.ro && !r.lockHeld.Load() {
		return false
	}
	if err := CheckRange(op, off, int64(len(p)), r.size.Load(), r.bs); err != nil {
		c.IODone(err)
		return true
	}
	var err error
	if op == OpWrite {
		err = r.acquireWrite()
	} else {
		err = r.acquire()
	}
	if err != nil {
		c.IODone(err)
		return true
	}
	defer r.release()
	if len(p) == 0 {
		c.IODone(nil)
		return true
	}
	ok, err := r.aio.start(op, p, off, c)
	if !ok {
		return false
	}
	if err != nil {
		c.IODone(r.fail(op, off, int64(len(p)), 0, err))
	}
	return true
}

// aioDone completes an asynchronous operation with librbd's return value:
// a read must have transferred all its bytes; a negative value is an
// errno, classified as for the synchronous calls.
func (r *RBD) aioDone(c Completion, op Op, off int64, n int, ret int64) {
	switch {
	case ret < 0:
		c.IODone(r.fail(op, off, int64(n), 0, aioErrno(ret)))
	case op == OpRead && ret != int64(n):
		c.IODone(r.fail(op, off, int64(n), int(ret), nil))
	default:
		c.IODone(nil)
	}
}

// Flush calls rbd_flush. See [Backend].
func (r *RBD) Flush() error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	if r.ro {
		return nil
	}
	if err := r.image.Flush(); err != nil {
		if rbdErrno(err) == syscall.EROFS && r.exclusive && !r.lockHeld.Load() {
			// librbd refuses to flush an image whose exclusive lock
			// another client holds; this one has nothing to flush: no
			// cache, and releasing the lock waited for its writes.
			return nil
		}
		if rbdErrno(err) == syscall.ESHUTDOWN && r.exclusive && !r.lockHeld.Load() && !r.writable.Load() {
			// Blocklisted (a gateway's successor fenced this client
			// after its group went inaccessible here) with its writes
			// off: nothing to flush either. No cache, so what it
			// acknowledged is on the OSDs; it takes no write any more;
			// a write still in librbd can only fail now.
			return nil
		}
		return r.fail(OpFlush, 0, 0, 0, err)
	}
	return nil
}

// WriteZeroes zeroes a range with rbd_writesame of a zero block, which
// librbd turns into a zeroing discard: the range reads as zeroes
// afterwards, and its objects are deallocated where whole. See [RBD].
func (r *RBD) WriteZeroes(off, length int64, deallocate bool) error {
	if err := CheckRange(OpWriteZeroes, off, length, r.size.Load(), r.bs); err != nil {
		return err
	}
	if err := r.acquireWrite(); err != nil {
		return err
	}
	defer r.release()
	for done := int64(0); done < length; {
		n := min(length-done, maxWriteSame)
		if _, err := r.image.WriteSame(uint64(off+done), uint64(n), rbdZeroes[:r.bs], rados.OpFlagNone); err != nil {
			return r.fail(OpWriteZeroes, off, length, 0, err)
		}
		done += n
	}
	return nil
}

// Discard deallocates a range with rbd_discard. It is advisory: pieces
// smaller than librbd's discard granularity keep their data. See [RBD].
func (r *RBD) Discard(off, length int64) error {
	if err := CheckRange(OpDiscard, off, length, r.size.Load(), r.bs); err != nil {
		return err
	}
	if err := r.acquireWrite(); err != nil {
		return err
	}
	defer r.release()
	if length == 0 {
		return nil
	}
	if _, err := r.image.Discard(uint64(off), uint64(length)); err != nil {
		return r.fail(OpDiscard, off, length, 0, err)
	}
	return nil
}

// Size returns the capacity in bytes: the image size, rounded down to the
// block size, as last seen (it follows `rbd resize`).
func (r *RBD) Size() int64 { return r.size.Load() }

// BlockSize returns the logical block size.
func (r *RBD) BlockSize() uint32 { return r.bs }

// Info describes the image (Size as at open).
func (r *RBD) Info() Info { return r.info }

// SizeChanged is notified after the image was resized. See [SizeNotifier].
func (r *RBD) SizeChanged() <-chan struct{} { return r.changed }

// WaitForLatestOSDMap waits until the backend's RADOS client has the
// cluster's latest OSD map (rados_wait_for_latest_osdmap). Its later
// operations carry that map's epoch, and an OSD handles an operation only
// once it has the operation's epoch itself: with every blocklist entry
// added before (a gateway's fence), so that no write of a fenced client
// can land after this client's next ones (librbd does the same after it
// blocklists the holder of an image's exclusive lock).
func (r *RBD) WaitForLatestOSDMap() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return fmt.Errorf("backend rbd %s: wait for the latest OSD map: %w", r.spec, ErrClosed)
	}
	if err := r.conn.WaitForLatestOSDMap(); err != nil {
		return fmt.Errorf("backend rbd %s: wait for the latest OSD map: %w", r.spec, rbdErr(err))
	}
	return nil
}

// CephClient returns the identity of the backend's RADOS client, which
// another gateway blocklists to fence this one.
func (r *RBD) CephClient() CephClientInfo { return r.client }

// Health reports that an RBD image has no device health of its own.
func (r *RBD) Health() (Health, error) {
	return Health{Reason: "rbd backend: no device-reported health (see the Ceph cluster's health)"}, nil
}

// Close waits for calls in progress and for the asynchronous operations in
// flight (each ends within OpTimeout; Close waits at most 3 OpTimeouts for
// them, then goes on: rbd_close waits for librbd's I/O, and what is left is
// completed with ErrUnavailable afterwards), then stops the header watch,
// closes the image (which flushes nothing, as there is no cache) and shuts
// the RADOS client down. With the cluster unreachable each of those steps
// is bounded by OpTimeout.
func (r *RBD) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	var errs []error
	if r.aio != nil {
		// Operations in flight end within the op timeout (a completion
		// with ETIMEDOUT); a write may take two operations (the
		// exclusive lock, then the write). Beyond that bound the image is
		// closed all the same: rbd_close waits for librbd's I/O itself.
		if !r.aio.drain(3 * r.opTimeout) {
			errs = append(errs, fmt.Errorf("asynchronous I/O still in flight after %s", 3*r.opTimeout))
		}
		r.aio.stopPoller()
	}
	if err := r.watch.Unwatch(); err != nil {
		errs = append(errs, fmt.Errorf("unwatch: %w", rbdErr(err)))
	}
	if err := r.image.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close the image: %w", rbdErr(err)))
	}
	if r.aio != nil {
		r.aio.closeAfterImage(func(c Completion, op Op, off int64, n int) {
			c.IODone(fmt.Errorf("backend rbd %s: %s at %d length %d: the image was closed with it in flight: %w: %w",
				r.spec, op, off, n, ErrUnavailable, ErrClosed))
		})
	}
	r.ioctx.Destroy()
	r.conn.Shutdown()
	r.lockMu.Lock()
	if r.inProcess {
		r.inProcess = false
		unclaimImage(r.claimKey)
	}
	r.lockMu.Unlock()
	close(r.changed)
	if err := errors.Join(errs...); err != nil {
		return &IOError{Kind: KindRBD, Path: r.spec, Op: OpClose, Err: err}
	}
	return nil
}

// fail turns a failed or short librbd call into the backend's error. A
// short transfer or EINVAL can mean the image shrank under the request:
// the size is read again, and a request now past the end is ErrOutOfRange.
func (r *RBD) fail(op Op, off, length int64, n int, err error) error {
	errno := rbdErrno(err)
	if err == nil || errors.Is(err, io.EOF) || errno == syscall.EINVAL {
		r.refreshSize()
		if rerr := CheckRange(op, off, length, r.size.Load(), r.bs); rerr != nil {
			return rerr
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("short transfer: %d of %d bytes: %w", n, length, io.ErrUnexpectedEOF)
		}
	}
	return r.opErr(op, off, length, err)
}

// opErr classifies a librbd error of op.
func (r *RBD) opErr(op Op, off, length int64, err error) error {
	errno := rbdErrno(err)
	switch {
	case unavailableErrno(errno):
		return fmt.Errorf("backend rbd %s: %s at %d length %d: %w: %w", r.spec, op, off, length, ErrUnavailable, errno)
	case errno == syscall.EROFS && !r.ro && op != OpRead:
		// The image is writable: librbd refuses the write because another
		// client holds the exclusive lock (rbd_lock_acquire) or took it
		// from this one. A path error: the host retries on another path.
		r.lockHeld.Store(false)
		return fmt.Errorf("backend rbd %s: %s at %d length %d: the image's exclusive lock is held by another client: %w: %w", r.spec, op, off, length, ErrUnavailable, errno)
	case errno == syscall.EROFS:
		return fmt.Errorf("backend rbd %s: %s at %d length %d: %w: %w", r.spec, op, off, length, ErrReadOnly, errno)
	case errno == syscall.EDQUOT:
		// Pool quota: as a full device (NVMe Capacity Exceeded).
		err = fmt.Errorf("%w (pool quota): %w", syscall.ENOSPC, errno)
	case errno != 0:
		err = errno
	}
	return &IOError{Kind: KindRBD, Path: r.spec, Op: op, Off: off, Len: length, Err: err}
}

// unavailableErrno reports errors that mean the cluster cannot be reached
// (or no longer accepts this client), not that the request is wrong.
func unavailableErrno(e syscall.Errno) bool {
	switch e {
	case syscall.ETIMEDOUT, // rados_osd_op_timeout, rados_mon_op_timeout
		syscall.ESHUTDOWN, // EBLOCKLISTED: this client was fenced
		syscall.ENOTCONN, syscall.ECONNREFUSED, syscall.ECONNRESET,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		return true
	}
	return false
}

// rbdErrno returns the errno of a go-ceph error, or 0.
func rbdErrno(err error) syscall.Errno {
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

// rbdErr is err with its errno in the chain (errors.Is(err,
// syscall.ETIMEDOUT)), and ErrUnavailable where the errno says the cluster
// is out of reach.
func rbdErr(err error) error {
	e := rbdErrno(err)
	switch {
	case e == 0:
		return err
	case unavailableErrno(e):
		return fmt.Errorf("%w: %w (%w)", ErrUnavailable, err, e)
	}
	return fmt.Errorf("%w (%w)", err, e)
}
