package backend

import (
	"errors"
	"time"
)

// RBDBuildTag is the build tag that compiles the rbd backend in. It needs
// cgo and the Ceph client libraries (librbd, librados), through
// github.com/ceph/go-ceph, which also wants the tag of the Ceph release it
// is built against when that release is older than squid: "pacific" for
// Debian 12's Ceph 16.2, so `go build -tags rbd,pacific`. `make build-rbd`
// picks the release tag from the installed librbd headers.
const RBDBuildTag = "rbd"

// ErrRBDNotBuilt is the error of opening kind rbd in a build without the
// rbd tag (the default static build).
var ErrRBDNotBuilt = errors.New("backend: kind rbd is not in this build of nvmetd: " +
	"build with cgo and -tags " + RBDBuildTag + " (make build-rbd; needs librbd-dev and librados-dev)")

// Defaults of [RBDOptions].
const (
	// DefaultRBDOpTimeout bounds one cluster operation (an OSD or monitor
	// request): well below the 30 s a Linux host waits for a command
	// (nvme_core.io_timeout) before it resets the controller, so that an
	// unreachable cluster turns into a path error the host retries
	// elsewhere rather than a timeout.
	DefaultRBDOpTimeout = 10 * time.Second
	// DefaultRBDConnectTimeout bounds connecting to the monitors and
	// authenticating (client_mount_timeout; Ceph's own default is 300 s).
	DefaultRBDConnectTimeout = 10 * time.Second
	// DefaultCephConf is the ceph.conf read when none is configured.
	DefaultCephConf = "/etc/ceph/ceph.conf"
	// DefaultCephClientID is the cephx user when none is configured
	// (client.admin, as for the ceph and rbd tools).
	DefaultCephClientID = "admin"
)

// RBDOptions configures the rbd backend (kind rbd, [Config]): a Ceph RBD
// image, through its own RADOS client connection.
type RBDOptions struct {
	Pool           string // RADOS pool holding the image; required
	Image          string // RBD image name; required
	RADOSNamespace string // RADOS namespace within the pool; empty: the default namespace

	CephConf string // ceph.conf: monitors and client settings; empty: DefaultCephConf
	ClientID string // cephx user name without "client."; empty: DefaultCephClientID
	Keyring  string // keyring with the user's key; empty: the one ceph.conf names

	BlockSize uint32 // 512 (default when 0) or 4096
	ReadOnly  bool   // open the image read-only; writes fail with ErrReadOnly

	// OpTimeout bounds each cluster operation (rados_osd_op_timeout and
	// rados_mon_op_timeout, in whole seconds, rounded up); 0:
	// DefaultRBDOpTimeout. An operation that exceeds it fails with
	// ErrUnavailable.
	OpTimeout time.Duration
	// ConnectTimeout bounds connecting and authenticating
	// (client_mount_timeout, whole seconds); 0: DefaultRBDConnectTimeout.
	ConnectTimeout time.Duration

	// DeferClaim opens the image without this process's claim on it
	// (Config.DeferClaim): a reload opens a namespace's new backend while
	// the old one, on the same image, still holds it; writes fail with
	// ErrUnavailable until Claim ([Claimer]).
	DeferClaim bool
}

// withDefaults returns o with the defaults filled in.
func (o RBDOptions) withDefaults() RBDOptions {
	if o.CephConf == "" {
		o.CephConf = DefaultCephConf
	}
	if o.ClientID == "" {
		o.ClientID = DefaultCephClientID
	}
	if o.BlockSize == 0 {
		o.BlockSize = 512
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultRBDOpTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultRBDConnectTimeout
	}
	return o
}

// Spec is the image in rbd's notation: pool/[namespace/]image.
func (o RBDOptions) Spec() string {
	if o.RADOSNamespace != "" {
		return o.Pool + "/" + o.RADOSNamespace + "/" + o.Image
	}
	return o.Pool + "/" + o.Image
}

// CephClient is implemented by the rbd backend: the identity of its RADOS
// client in the cluster. A gateway that takes over an image from a dead
// one fences the dead one's client by these (`ceph osd blocklist add
// <Addrs>`), so that the OSDs refuse any write it still has in flight.
type CephClient interface {
	CephClient() CephClientInfo
}

// CephClientInfo identifies a RADOS client.
type CephClientInfo struct {
	// FSID is the cluster's fsid.
	FSID string
	// Entity is the cephx name, "client." and the client id.
	Entity string
	// Addrs are the client's addresses as the cluster sees them
	// (rados_getaddrs), e.g. "[v2:127.0.0.1:0/3511285521]": what `ceph osd
	// blocklist add` takes (one address of the vector).
	Addrs string
	// InstanceID is the client's global id (rados_get_instance_id), the
	// number in "client.4123" in the cluster's logs and watcher lists.
	InstanceID uint64
	// Image is the image the client was opened for, in rbd's notation
	// (RBDOptions.Spec: pool/[namespace/]image): a gateway fences the
	// clients of one ANA group's images only.
	Image string
}

// WriteLocker is implemented by the rbd backend: storage that other
// processes (another gateway, a stand-alone nvmetd) can open too, and that
// one client at a time may write, by librbd's exclusive lock taken with
// rbd_lock_acquire(RBD_LOCK_MODE_EXCLUSIVE). In that mode librbd never
// hands the lock over on request: a second client's write fails (EROFS,
// here ErrUnavailable) until the holder releases it or is blocklisted.
type WriteLocker interface {
	// SetWritable(true) allows writes and takes the lock now (a holder
	// that was blocklisted loses it: librbd breaks the lock of a client
	// whose watch is gone); if that fails, each write tries again and
	// fails with ErrUnavailable while another client holds it.
	// SetWritable(false) refuses writes with ErrUnavailable from now on
	// and releases the lock, which librbd does only once the writes it
	// has in flight have completed. A backend opens writable.
	SetWritable(writable bool) error
	// WriteLockErr is nil if writes are protected by the lock (held now,
	// or taken on the next write, or the backend is read-only), else why
	// not: the image lacks the exclusive-lock feature.
	WriteLockErr() error
}

// ErrNoExclusiveLock is in WriteLockErr's error for an image without the
// exclusive-lock feature: nothing stops a second client from writing it.
var ErrNoExclusiveLock = errors.New("the image does not have the exclusive-lock feature")
