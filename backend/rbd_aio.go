//go:build rbd

package backend

/*
#cgo LDFLAGS: -lrbd
#include <errno.h>
#include <stdint.h>
#include <rbd/librbd.h>

enum { NVMETD_AIO_READ = 0, NVMETD_AIO_WRITE = 1 };

// nvmetd_rbd_start starts one asynchronous read or write of len bytes at
// off, tagged with tag; the completion has no callback: librbd queues it
// for rbd_poll_io_events and signals the image's eventfd.
static int nvmetd_rbd_start(rbd_image_t img, int op, uint64_t off, size_t len, char *buf, uintptr_t tag) {
	rbd_completion_t c;
	int r = rbd_aio_create_completion((void *)tag, NULL, &c);
	if (r < 0)
		return r;
	if (op == NVMETD_AIO_READ)
		r = rbd_aio_read(img, off, len, buf, c);
	else
		r = rbd_aio_write(img, off, len, buf, c);
	if (r < 0)
		rbd_aio_release(c);
	return r;
}

// nvmetd_rbd_reap takes up to n (at most 64) completed operations: their
// tags and return values, and releases them. It returns how many, or a
// negative errno.
static int nvmetd_rbd_reap(rbd_image_t img, uintptr_t *tags, int64_t *rets, int n) {
	rbd_completion_t comps[64];
	if (n > 64)
		n = 64;
	int k = rbd_poll_io_events(img, comps, n);
	for (int i = 0; i < k; i++) {
		tags[i] = (uintptr_t)rbd_aio_get_arg(comps[i]);
		rets[i] = (int64_t)rbd_aio_get_return_value(comps[i]);
		rbd_aio_release(comps[i]);
	}
	return k;
}

static int nvmetd_rbd_notify_eventfd(rbd_image_t img, int fd) {
	return rbd_set_image_notification(img, fd, EVENT_TYPE_EVENTFD);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rbd"
	"golang.org/x/sys/unix"
)

// rbdMaxAIO caps the asynchronous operations in flight on one image;
// beyond it StartReadAt/StartWriteAt refuse and the target runs the
// command on a worker (synchronously), where it waits its turn.
const rbdMaxAIO = 128

// rbdReapBatch is how many completions one cgo call takes.
const rbdReapBatch = 64

// rbdAIO is one slot of an operation in flight.
type rbdAIO struct {
	done Completion
	// pin keeps the buffer pinned while librbd holds a pointer to it
	// (cgo: C may keep a Go pointer past the call only to pinned memory).
	pin runtime.Pinner
	op  Op
	off int64
	n   int
}

// rbdAsync is the asynchronous data path of an RBD: operations started
// with rbd_aio_read/rbd_aio_write and completions without callbacks, which
// librbd queues for rbd_poll_io_events and announces on an eventfd
// (rbd_set_image_notification, EVENT_TYPE_EVENTFD). One goroutine reads the
// eventfd through the runtime's netpoller and delivers the completions:
// nothing parks an OS thread per operation.
type rbdAsync struct {
	img C.rbd_image_t
	efd *os.File // the eventfd, non-blocking, in the netpoller
	raw int      // its descriptor number (for the stop wake-up)

	mu          sync.Mutex
	slots       [rbdMaxAIO]rbdAIO
	free        []int32 // indices of free slots (a stack)
	outstanding int
	idle        chan struct{} // signalled when outstanding drops to 0 while draining
	draining    bool

	stop atomic.Bool
	done chan struct{} // closed when the poller has returned

	// Reaped batch (poller goroutine only).
	tags [rbdReapBatch]C.uintptr_t
	rets [rbdReapBatch]C.int64_t
	buf  [8]byte
}

// imageHandle returns the rbd_image_t of a go-ceph Image (an unexported
// field in go-ceph v0.41.0, which has no accessor), or nil when the field
// is not there as expected (another go-ceph version): the backend then
// has no asynchronous path.
func imageHandle(img *rbd.Image) unsafe.Pointer {
	v := reflect.ValueOf(img).Elem()
	f := v.FieldByName("image")
	if !f.IsValid() || f.Type().Size() != unsafe.Sizeof(uintptr(0)) ||
		(f.Kind() != reflect.UnsafePointer && f.Kind() != reflect.Pointer) {
		return nil
	}
	return *(*unsafe.Pointer)(unsafe.Pointer(f.UnsafeAddr()))
}

// rbdDeliver completes an operation: c, and what it was, with librbd's
// return value (bytes transferred, or a negative errno).
type rbdDeliver func(c Completion, op Op, off int64, n int, ret int64)

// newRBDAsync sets the image's completion notification on a new eventfd
// and starts the poller, which calls deliver for each completion.
func newRBDAsync(img *rbd.Image, deliver rbdDeliver) (*rbdAsync, error) {
	h := imageHandle(img)
	if h == nil {
		return nil, errors.New("the go-ceph Image has no rbd_image_t field (go-ceph version?)")
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	a := &rbdAsync{img: C.rbd_image_t(h), raw: fd, idle: make(chan struct{}, 1), done: make(chan struct{})}
	if r := C.nvmetd_rbd_notify_eventfd(a.img, C.int(fd)); r < 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("rbd_set_image_notification: %w", syscall.Errno(-r))
	}
	// A non-blocking descriptor: os.NewFile puts it in the netpoller.
	a.efd = os.NewFile(uintptr(fd), "rbd-eventfd")
	a.free = make([]int32, rbdMaxAIO)
	for i := range a.free {
		a.free[i] = int32(rbdMaxAIO - 1 - i)
	}
	go a.poll(deliver)
	return a, nil
}

// start submits one read or write; false: no slot free (nothing done).
// With true and a nil error the operation is in flight; an error means
// librbd refused it at once (the slot is free again).
func (a *rbdAsync) start(op Op, p []byte, off int64, c Completion) (bool, error) {
	a.mu.Lock()
	if len(a.free) == 0 || a.draining {
		a.mu.Unlock()
		return false, nil
	}
	i := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	a.outstanding++
	// The slot is written under mu and read under mu by the poller: the
	// hand-over through librbd and the eventfd is invisible to the race
	// detector.
	s := &a.slots[i]
	s.done, s.op, s.off, s.n = c, op, off, len(p)
	s.pin.Pin(&p[0])
	a.mu.Unlock()
	cop := C.int(C.NVMETD_AIO_READ)
	if op == OpWrite {
		cop = C.NVMETD_AIO_WRITE
	}
	r := C.nvmetd_rbd_start(a.img, cop, C.uint64_t(off), C.size_t(len(p)), (*C.char)(unsafe.Pointer(&p[0])), C.uintptr_t(i))
	if r < 0 {
		a.take(i)
		return true, aioErrno(r)
	}
	return true, nil
}

// take frees slot i (unpinning its buffer) and returns what it held.
func (a *rbdAsync) take(i int32) (c Completion, op Op, off int64, n int) {
	a.mu.Lock()
	s := &a.slots[i]
	c, op, off, n = s.done, s.op, s.off, s.n
	if c == nil { // not in flight (a stray tag)
		a.mu.Unlock()
		return nil, op, 0, 0
	}
	s.pin.Unpin()
	s.done = nil
	a.free = append(a.free, i)
	a.outstanding--
	if a.outstanding == 0 && a.draining {
		select {
		case a.idle <- struct{}{}:
		default:
		}
	}
	a.mu.Unlock()
	return c, op, off, n
}

// poll reads the eventfd (parking the goroutine in the netpoller, not an
// OS thread) and delivers what rbd_poll_io_events returns, until stop.
//
// The eventfd is read first, then the queue is reaped until empty: librbd
// queues a completion before it signals the eventfd, so every completion
// whose signal the read consumed is in the queue by then, and one queued
// after the reap signals the next read. One cgo call and one read per
// wake-up (reaping first costs a second, empty reap and a second read).
func (a *rbdAsync) poll(deliver rbdDeliver) {
	defer close(a.done)
	for {
		if _, err := a.efd.Read(a.buf[:]); errors.Is(err, os.ErrClosed) {
			return
		}
		for {
			k := int(C.nvmetd_rbd_reap(a.img, &a.tags[0], &a.rets[0], rbdReapBatch))
			for j := 0; j < k; j++ {
				i := int32(a.tags[j])
				if i < 0 || i >= rbdMaxAIO {
					continue
				}
				c, op, off, n := a.take(i)
				if c != nil {
					deliver(c, op, off, n, int64(a.rets[j]))
				}
			}
			if k < rbdReapBatch {
				break
			}
		}
		if a.stop.Load() {
			return
		}
	}
}

// drain stops new operations and waits up to bound for those in flight;
// it reports whether none is left.
func (a *rbdAsync) drain(bound time.Duration) bool {
	a.mu.Lock()
	a.draining = true
	n := a.outstanding
	a.mu.Unlock()
	if n == 0 {
		return true
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-a.idle:
		return true
	case <-t.C:
		return false
	}
}

// stopPoller ends the poller goroutine (before the image is closed: it
// calls rbd_poll_io_events on it).
func (a *rbdAsync) stopPoller() {
	a.stop.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(a.raw, one[:])
	<-a.done
}

// closeAfterImage closes the eventfd and fails the operations still in
// flight (the drain bound passed): the image is closed, and rbd_close
// waited for librbd's in-flight I/O, so their buffers are free again.
func (a *rbdAsync) closeAfterImage(fail func(c Completion, op Op, off int64, n int)) {
	_ = a.efd.Close()
	for i := range a.slots {
		a.mu.Lock()
		busy := a.slots[i].done != nil
		a.mu.Unlock()
		if busy {
			c, op, off, n := a.take(int32(i))
			fail(c, op, off, n)
		}
	}
}

// aioErrno is a negative return value of librbd, as an error that
// rbdErrno understands (the ErrorCode of go-ceph's errors).
type aioErrno int64

func (e aioErrno) Error() string  { return syscall.Errno(-e).Error() }
func (e aioErrno) ErrorCode() int { return int(e) }
func (e aioErrno) Unwrap() error  { return syscall.Errno(-e) }
