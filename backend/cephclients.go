package backend

import (
	"errors"
	"slices"
	"sync"
)

// cephClients are the RADOS clients of the rbd backends Open returned in
// this process (see CephClients).
var cephClients struct {
	mu   sync.Mutex
	list []CephClientInfo
	open []osdMapWaiter // rbd backends, until seen closed
}

// osdMapWaiter is a backend whose RADOS client can wait for the latest
// OSD map (the rbd backend).
type osdMapWaiter interface {
	CephClient
	WaitForLatestOSDMap() error
}

// noteCephClient records b's RADOS client if it has one.
func noteCephClient(b Backend) {
	c, ok := b.(CephClient)
	if !ok {
		return
	}
	info := c.CephClient()
	cephClients.mu.Lock()
	defer cephClients.mu.Unlock()
	if !slices.Contains(cephClients.list, info) {
		cephClients.list = append(cephClients.list, info)
	}
	if w, ok := b.(osdMapWaiter); ok {
		cephClients.open = append(cephClients.open, w)
	}
}

// WaitForLatestOSDMap makes the RADOS client of every open rbd backend
// [Open] returned on one of images (pool/[namespace/]image) wait for the
// cluster's latest OSD map ([RBD.WaitForLatestOSDMap]): the barrier a
// gateway runs after a fence, on the clients that will carry the group's
// writes. Closed backends are skipped (and forgotten).
func WaitForLatestOSDMap(images map[string]bool) error {
	cephClients.mu.Lock()
	var todo []osdMapWaiter
	for _, w := range cephClients.open {
		if images[w.CephClient().Image] {
			todo = append(todo, w)
		}
	}
	cephClients.mu.Unlock()
	var errs []error
	for _, w := range todo {
		err := w.WaitForLatestOSDMap()
		switch {
		case errors.Is(err, ErrClosed):
			cephClients.mu.Lock()
			cephClients.open = slices.DeleteFunc(cephClients.open, func(x osdMapWaiter) bool { return x == w })
			cephClients.mu.Unlock()
		case err != nil:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CephClients returns the RADOS clients of every rbd backend [Open] has
// opened in this process, closed ones included: the clients through which
// this process may have written to the cluster. A gateway group records
// them so that a survivor can fence all of them (an address of a closed
// client is blocklisted for nothing, harmlessly).
func CephClients() []CephClientInfo {
	cephClients.mu.Lock()
	defer cephClients.mu.Unlock()
	return slices.Clone(cephClients.list)
}
