package backend

import (
	"slices"
	"sync"
)

// cephClients are the RADOS clients of the rbd backends Open returned in
// this process (see CephClients).
var cephClients struct {
	mu   sync.Mutex
	list []CephClientInfo
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
