package gwnet

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// Where a pool's objects live, for the scenarios that cut a gateway from
// some OSDs only (docs/rbd.md, "cut from the image's OSDs"): each OSD's
// client port (the nftables rules drop those ports on the cluster's
// address), the primary OSD of an object, an image's id (its objects'
// names carry it), and a gateway group name whose objects share one
// primary OSD (the OSD the test keeps reachable).

// AdminCeph runs the ceph tool as client.admin on c.
func AdminCeph(c *cephtest.Cluster, args ...string) (string, error) {
	out, err := exec.Command("ceph", append([]string{"--conf", c.Conf, "--name", "client.admin", "--keyring", c.AdminKeyring}, args...)...).CombinedOutput()
	return string(out), err
}

// OSDPorts returns each OSD's public (client) TCP port on the cluster's
// address.
func OSDPorts(t testing.TB, c *cephtest.Cluster) map[int]int {
	t.Helper()
	out, err := AdminCeph(c, "osd", "dump", "--format", "json")
	if err != nil {
		t.Fatalf("ceph osd dump: %v\n%s", err, out)
	}
	var d struct {
		OSDs []struct {
			OSD         int `json:"osd"`
			PublicAddrs struct {
				AddrVec []struct {
					Addr string `json:"addr"`
				} `json:"addrvec"`
			} `json:"public_addrs"`
		} `json:"osds"`
	}
	if err := json.Unmarshal([]byte(out[max(strings.Index(out, "{"), 0):]), &d); err != nil {
		t.Fatalf("ceph osd dump: %v\n%s", err, out)
	}
	ports := map[int]int{}
	for _, o := range d.OSDs {
		for _, a := range o.PublicAddrs.AddrVec {
			_, p, ok := strings.Cut(a.Addr, ":")
			if n, err := strconv.Atoi(p); ok && err == nil {
				ports[o.OSD] = n
			}
		}
	}
	if len(ports) != len(d.OSDs) {
		t.Fatalf("ceph osd dump: ports %v of %d OSDs\n%s", ports, len(d.OSDs), out)
	}
	return ports
}

// PrimaryOSD returns the primary OSD of object obj in the cluster's pool
// (ceph osd map: the monitor's answer).
func PrimaryOSD(t testing.TB, c *cephtest.Cluster, obj string) int {
	t.Helper()
	out, err := AdminCeph(c, "osd", "map", c.Pool, obj, "--format", "json")
	if err != nil {
		t.Fatalf("ceph osd map %s %s: %v\n%s", c.Pool, obj, err, out)
	}
	var m struct {
		ActingPrimary int `json:"acting_primary"`
	}
	if err := json.Unmarshal([]byte(out[max(strings.Index(out, "{"), 0):]), &m); err != nil {
		t.Fatalf("ceph osd map: %v\n%s", err, out)
	}
	return m.ActingPrimary
}

// ObjectMapper fetches the cluster's current OSD map and returns a
// function that maps objects of the pool to their primary OSD
// (osdmaptool --test-map-object: the same CRUSH computation as ceph osd
// map, without a monitor round trip per name).
func ObjectMapper(t testing.TB, c *cephtest.Cluster) func(objs ...string) map[string]int {
	t.Helper()
	f := filepath.Join(t.TempDir(), "osdmap")
	if out, err := AdminCeph(c, "osd", "getmap", "-o", f); err != nil {
		t.Fatalf("ceph osd getmap: %v\n%s", err, out)
	}
	out, err := AdminCeph(c, "osd", "pool", "ls", "detail", "--format", "json")
	if err != nil {
		t.Fatalf("ceph osd pool ls detail: %v\n%s", err, out)
	}
	var pools []struct {
		Pool     int    `json:"pool_id"`
		PoolName string `json:"pool_name"`
	}
	if err := json.Unmarshal([]byte(out[max(strings.Index(out, "["), 0):]), &pools); err != nil {
		t.Fatalf("ceph osd pool ls detail: %v\n%s", err, out)
	}
	pool := -1
	for _, p := range pools {
		if p.PoolName == c.Pool {
			pool = p.Pool
		}
	}
	if pool < 0 {
		t.Fatalf("ceph osd pool ls detail: no pool %s\n%s", c.Pool, out)
	}
	rx := regexp.MustCompile(`-> [0-9]+\.[0-9a-f]+ -> \[(\d+)`)
	return func(objs ...string) map[string]int {
		t.Helper()
		m := map[string]int{}
		for _, o := range objs {
			out, err := exec.Command("osdmaptool", f, "--test-map-object", o, "--pool", strconv.Itoa(pool)).CombinedOutput()
			sm := rx.FindSubmatch(out)
			if err != nil || sm == nil {
				t.Fatalf("osdmaptool --test-map-object %s: %v\n%s", o, err, out)
			}
			m[o], _ = strconv.Atoi(string(sm[1]))
		}
		return m
	}
}

// MapObjects returns the primary OSD of each object in the cluster's pool.
func MapObjects(t testing.TB, c *cephtest.Cluster, objs ...string) map[string]int {
	t.Helper()
	return ObjectMapper(t, c)(objs...)
}

// PickGroup returns a gateway group name whose objects (objects(name):
// the callers pass the ANA group's object, the records and the
// configuration objects, gateway.ObjectName and its kin) have one primary
// OSD, and that OSD. The first object's primary is cross-checked with
// the monitor. 300 names at most: with three OSDs, four objects share one
// primary with a chance of 1 in 27 per name (no name in 300: about
// 1 in 80,000).
func PickGroup(t testing.TB, c *cephtest.Cluster, objects func(name string) []string) (string, int) {
	t.Helper()
	mapObjects := ObjectMapper(t, c)
	for range 300 {
		var rb [4]byte
		rand.Read(rb[:])
		name := "p" + hex.EncodeToString(rb[:])
		objs := objects(name)
		m := mapObjects(objs...)
		same := true
		for _, o := range objs[1:] {
			same = same && m[o] == m[objs[0]]
		}
		if same {
			if p := PrimaryOSD(t, c, objs[0]); p != m[objs[0]] {
				t.Fatalf("osdmaptool maps %s to osd.%d, ceph osd map to osd.%d", objs[0], m[objs[0]], p)
			}
			return name, m[objs[0]]
		}
	}
	t.Fatal("no group name with its objects on one primary OSD in 300 tries")
	return "", 0
}

// ImageID returns an image's id (its objects' names carry it:
// rbd_header.<id>, rbd_data.<id>.<object number, 16 hex digits>).
func ImageID(t testing.TB, c *cephtest.Cluster, image string) string {
	t.Helper()
	out, err := c.RBD("info", "--format", "json", "--pool", c.Pool, image)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.ID == "" {
		t.Fatalf("rbd info %s: %v\n%s", image, err, out)
	}
	return info.ID
}
