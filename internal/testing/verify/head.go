package verify

import (
	"context"
	"sync"

	"github.com/nvmetd/nvmetd/initiator"
)

// Head is the Go host's multipath head as a PathDevice (and a
// GiveUpDevice): each I/O is one Request, and its path is the address of
// the controller whose completion ended it (Request.Path); the paths it
// was given up on before are those of Request.PathFailed.
func Head(h *initiator.Head) PathDevice { return &head{Head: h} }

type head struct {
	*initiator.Head
	pool sync.Pool // *headReq
}

type headReq struct {
	initiator.Request
	ch     chan struct{}
	gaveUp func(path string, err error)
}

func (h *head) io(ctx context.Context, op initiator.Op, p []byte, off int64, gaveUp func(string, error)) (string, error) {
	r, _ := h.pool.Get().(*headReq)
	if r == nil {
		r = &headReq{ch: make(chan struct{}, 1)}
		r.Done = func(*initiator.Request) { r.ch <- struct{}{} }
		r.PathFailed = func(_ *initiator.Request, pa *initiator.Path, err error) {
			if r.gaveUp != nil {
				r.gaveUp(pa.Address(), err)
			}
		}
	}
	defer h.pool.Put(r)
	r.Op, r.Data, r.Offset, r.Err, r.gaveUp = op, p, off, nil, gaveUp
	defer func() { r.gaveUp = nil }()
	if err := h.Submit(ctx, &r.Request); err != nil {
		return "", err
	}
	<-r.ch
	r.Data = nil
	var path string
	if pa := r.Path(); pa != nil {
		path = pa.Address()
	}
	return path, r.Err
}

func (h *head) ReadAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	return h.io(ctx, initiator.OpRead, p, off, nil)
}

func (h *head) WriteAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	return h.io(ctx, initiator.OpWrite, p, off, nil)
}

func (h *head) WriteAtGiveUps(ctx context.Context, p []byte, off int64, gaveUp func(path string, err error)) (string, error) {
	return h.io(ctx, initiator.OpWrite, p, off, gaveUp)
}
