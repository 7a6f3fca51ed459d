//go:build rbd

package backend

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
)

// rbdZeroes is the block WriteZeroes repeats (rbd_writesame).
var rbdZeroes [4096]byte

// maxWriteSame is the largest length of one rbd_writesame call (librbd
// refuses more than INT_MAX bytes), a multiple of every block size.
const maxWriteSame = 1 << 30

// openRBD is the kind rbd case of [Open].
func openRBD(opts RBDOptions) (Backend, error) {
	r, err := OpenRBD(opts)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// OpenRBD connects to the cluster and opens the image.
func OpenRBD(opts RBDOptions) (_ *RBD, err error) {
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
		// No write-back cache in this process (see RBD).
		{"rbd_cache", "false"},
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

	r := &RBD{
		spec: spec, bs: bs, ro: o.ReadOnly,
		conn: conn, ioctx: ioctx, image: image, opTimeout: o.OpTimeout,
		changed: make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		client: CephClientInfo{
			FSID: fsid, Entity: "client." + o.ClientID, Addrs: addrs, InstanceID: conn.GetInstanceID(), Image: spec,
		},
	}
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

// acquireWrite is acquire for calls that modify data.
func (r *RBD) acquireWrite() error {
	if err := r.acquire(); err != nil {
		return err
	}
	if r.ro {
		r.release()
		return ErrReadOnly
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
// every slot is taken (or there is no such path).
func (r *RBD) startAIO(op Op, p []byte, off int64, c Completion) bool {
	if r.aio == nil {
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
