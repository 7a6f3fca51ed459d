package backend

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config selects and configures a backend for [Open]. Field names in
// validation errors are the snake_case forms of these names.
type Config struct {
	// Kind is "file", "block", "null", "memory" or "rbd". Required.
	Kind Kind

	// Path is the file (kind file) or device node (kind block). Required
	// for those kinds, not allowed for the others.
	Path string

	// Size is the capacity in bytes, a multiple of BlockSize.
	//   - null, memory: required.
	//   - rbd: not allowed; the image's size (rounded down to BlockSize) is
	//     the capacity, and follows `rbd resize` (see [SizeNotifier]).
	//   - file: 0 uses the existing file's size; otherwise a missing file is
	//     created sparse at Size, a smaller file is grown (sparse) to Size,
	//     and a larger file is an error (never shrunk).
	//   - block: 0 uses the whole device; otherwise at most the device size,
	//     exporting the first Size bytes.
	Size int64

	// BlockSize is the logical block size: 512 or 4096. 0 means 512, or for
	// kind block the device's logical block size; for block it must be a
	// multiple of the device's.
	BlockSize uint32

	// ReadOnly opens the storage read-only; writes fail with ErrReadOnly.
	ReadOnly bool

	// Direct bypasses the page cache with O_DIRECT (kind file). Block
	// devices are always opened O_DIRECT. Not allowed for null and memory.
	Direct bool

	// CreateDirs creates missing parent directories (mode 0700) of a file
	// that is created (kind file only).
	CreateDirs bool

	// MustExist refuses to create a missing file (kind file only).
	MustExist bool

	// NoLock skips the advisory flock that stops two openers from using
	// one file read-write (kind file only).
	NoLock bool

	// Exclusive opens the device O_EXCL, failing if it is mounted or held
	// by another exclusive opener (kind block only).
	Exclusive bool

	// DriveDB is the path of a smartmontools-derived drivedb.yaml used to
	// name ATA SMART attributes in HealthReport (kind block only). Empty
	// uses a built-in table of common attributes.
	DriveDB string

	// Pattern is the byte pattern reads return, repeated from offset 0
	// (kind null only). Empty means zeroes.
	Pattern []byte

	// The Ceph RBD image (kind rbd only; see [RBDOptions]). Pool and Image
	// are required.
	Pool           string        // RADOS pool of the image
	Image          string        // RBD image name
	RADOSNamespace string        // RADOS namespace in the pool; empty: the default one
	CephConf       string        // ceph.conf path; empty: /etc/ceph/ceph.conf
	ClientID       string        // cephx user without "client.": empty: admin
	Keyring        string        // keyring path; empty: as ceph.conf says
	OpTimeout      time.Duration // bound of one cluster operation; 0: DefaultRBDOpTimeout
	ConnectTimeout time.Duration // bound of connecting; 0: DefaultRBDConnectTimeout

	// NoFill leaves read buffers untouched instead of zeroing them (kind
	// null only), as SPDK's null bdev and Linux null_blk: for measuring the
	// transport alone. Reads then return whatever the buffer held.
	NoFill bool

	// DeferClaim opens the storage without its claim (the flock of a file
	// unless NoLock, the O_EXCL of a block device with Exclusive); the
	// backend then implements [Claimer] and takes the claim when Claim is
	// called (kind rbd: the process's claim on the image, and writes). A
	// reload uses it to open a namespace's new backend while the
	// old one, on the same storage, still holds the claim.
	DeferClaim bool
}

// Claimer is a backend opened with Config.DeferClaim.
type Claimer interface {
	// Claim takes the claim Open deferred: the file's flock, or an O_EXCL
	// open of the block device held until Close. It fails with ErrBusy if
	// another opener holds it. Claiming twice is a no-op.
	Claim() error
}

// ConfigError is an invalid configuration value.
type ConfigError struct {
	Field  string // snake_case name of the Config field, e.g. "block_size"
	Reason string
}

func (e *ConfigError) Error() string { return "backend: " + e.Field + ": " + e.Reason }

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// maxPattern bounds Config.Pattern.
const maxPattern = 4096

// Validate checks the configuration without touching the file system. It
// returns the first problem as a *ConfigError.
func (c *Config) Validate() error {
	switch c.Kind {
	case KindFile, KindBlock, KindNull, KindMemory, KindRBD:
	case "":
		return cfgErr("kind", "missing (want file, block, null, memory or rbd)")
	default:
		return cfgErr("kind", "%q is not one of file, block, null, memory, rbd", string(c.Kind))
	}
	hasPath := c.Kind == KindFile || c.Kind == KindBlock
	if hasPath && c.Path == "" {
		return cfgErr("path", "required for kind %s", c.Kind)
	}
	if !hasPath && c.Path != "" {
		return cfgErr("path", "not used by kind %s", c.Kind)
	}
	if err := checkBlockSize(c.BlockSize); err != nil {
		return err
	}
	bs := c.BlockSize
	if bs == 0 {
		bs = 512
	}
	needSize := c.Kind == KindNull || c.Kind == KindMemory
	if c.Kind == KindRBD && c.Size != 0 {
		return cfgErr("size", "not used by kind rbd: the image's size is the capacity (rbd resize changes it)")
	}
	if err := checkSize(c.Size, bs, needSize); err != nil {
		return err
	}
	if c.Direct && !hasPath {
		return cfgErr("direct", "not used by kind %s", c.Kind)
	}
	if c.Kind != KindFile {
		switch {
		case c.CreateDirs:
			return cfgErr("create_dirs", "only used by kind file")
		case c.MustExist:
			return cfgErr("must_exist", "only used by kind file")
		case c.NoLock:
			return cfgErr("no_lock", "only used by kind file")
		}
	}
	if c.MustExist && c.CreateDirs {
		return cfgErr("create_dirs", "contradicts must_exist")
	}
	if c.Kind != KindBlock {
		switch {
		case c.Exclusive:
			return cfgErr("exclusive", "only used by kind block")
		case c.DriveDB != "":
			return cfgErr("drive_db", "only used by kind block")
		}
	}
	if len(c.Pattern) > 0 && c.Kind != KindNull {
		return cfgErr("pattern", "only used by kind null")
	}
	if c.NoFill && c.Kind != KindNull {
		return cfgErr("no_fill", "only used by kind null")
	}
	if len(c.Pattern) > maxPattern {
		return cfgErr("pattern", "%d bytes is longer than the limit of %d", len(c.Pattern), maxPattern)
	}
	if c.Kind != KindRBD {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"pool", c.Pool != ""}, {"image", c.Image != ""}, {"rados_namespace", c.RADOSNamespace != ""},
			{"ceph_conf", c.CephConf != ""}, {"client_id", c.ClientID != ""}, {"keyring", c.Keyring != ""},
			{"op_timeout", c.OpTimeout != 0}, {"connect_timeout", c.ConnectTimeout != 0},
		} {
			if f.set {
				return cfgErr(f.name, "only used by kind rbd")
			}
		}
		return nil
	}
	return c.rbdOptions().validate()
}

// rbdOptions returns the kind rbd part of c.
func (c *Config) rbdOptions() RBDOptions {
	return RBDOptions{
		Pool: c.Pool, Image: c.Image, RADOSNamespace: c.RADOSNamespace,
		CephConf: c.CephConf, ClientID: c.ClientID, Keyring: c.Keyring,
		BlockSize: c.BlockSize, ReadOnly: c.ReadOnly,
		OpTimeout: c.OpTimeout, ConnectTimeout: c.ConnectTimeout,
	}
}

// maxRBDTimeout bounds RBDOptions.OpTimeout and ConnectTimeout.
const maxRBDTimeout = time.Hour

// validate checks the options without contacting the cluster.
func (o RBDOptions) validate() error {
	name := func(field, what, v string, required bool) error {
		switch {
		case v == "" && required:
			return cfgErr(field, "required for kind rbd")
		case strings.ContainsAny(v, "/@\x00"):
			// rbd's image spec is pool/namespace/image@snapshot.
			return cfgErr(field, "%q: %s names cannot contain '/', '@' or NUL", v, what)
		}
		return nil
	}
	if err := name("pool", "pool", o.Pool, true); err != nil {
		return err
	}
	if err := name("image", "image", o.Image, true); err != nil {
		return err
	}
	if err := name("rados_namespace", "RADOS namespace", o.RADOSNamespace, false); err != nil {
		return err
	}
	if strings.HasPrefix(o.ClientID, "client.") {
		return cfgErr("client_id", "%q: give the id without \"client.\" (%q)", o.ClientID, strings.TrimPrefix(o.ClientID, "client."))
	}
	if strings.ContainsAny(o.ClientID, " \x00") {
		return cfgErr("client_id", "%q: no spaces or NUL", o.ClientID)
	}
	if err := checkBlockSize(o.BlockSize); err != nil {
		return err
	}
	for _, t := range []struct {
		field string
		d     time.Duration
	}{{"op_timeout", o.OpTimeout}, {"connect_timeout", o.ConnectTimeout}} {
		if t.d < 0 || t.d > maxRBDTimeout {
			return cfgErr(t.field, "%s is out of range (0 for the default, or up to %s)", t.d, maxRBDTimeout)
		}
	}
	return nil
}

// checkBlockSize accepts 512, 4096 and 0 (the default).
func checkBlockSize(bs uint32) error {
	switch bs {
	case 0, 512, 4096:
		return nil
	}
	return cfgErr("block_size", "%d is not 512 or 4096", bs)
}

// checkSize accepts positive multiples of bs, and 0 unless required.
func checkSize(size int64, bs uint32, required bool) error {
	if size == 0 && !required {
		return nil
	}
	if size <= 0 || size%int64(bs) != 0 {
		return cfgErr("size", "%s is not a positive multiple of block size %d", strconv.FormatInt(size, 10), bs)
	}
	return nil
}

// Open validates cfg and opens the backend it describes.
func Open(cfg Config) (Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var (
		b   Backend
		err error
	)
	// Each case checks err itself so that a failed open returns a nil
	// interface, not an interface holding a nil pointer.
	switch cfg.Kind {
	case KindFile:
		var f *File
		if f, err = OpenFile(cfg.Path, FileOptions{
			Size: cfg.Size, BlockSize: cfg.BlockSize, ReadOnly: cfg.ReadOnly, Direct: cfg.Direct,
			CreateDirs: cfg.CreateDirs, MustExist: cfg.MustExist, NoLock: cfg.NoLock || cfg.DeferClaim,
		}); err == nil {
			f.deferredLock = cfg.DeferClaim && !cfg.NoLock
			b = f
		}
	case KindBlock:
		var d *Block
		if d, err = OpenBlock(cfg.Path, BlockOptions{
			Size: cfg.Size, BlockSize: cfg.BlockSize, ReadOnly: cfg.ReadOnly,
			Exclusive: cfg.Exclusive && !cfg.DeferClaim, DriveDB: cfg.DriveDB,
		}); err == nil {
			d.deferredExcl = cfg.DeferClaim && cfg.Exclusive
			b = d
		}
	case KindRBD:
		o := cfg.rbdOptions()
		o.DeferClaim = cfg.DeferClaim
		if b, err = openRBD(o); err == nil {
			noteCephClient(b)
		}
	case KindNull:
		var n *Null
		if n, err = OpenNull(NullOptions{Size: cfg.Size, BlockSize: cfg.BlockSize, ReadOnly: cfg.ReadOnly, Pattern: cfg.Pattern, NoFill: cfg.NoFill}); err == nil {
			b = n
		}
	default:
		var m *Memory
		if m, err = OpenMemory(MemoryOptions{Size: cfg.Size, BlockSize: cfg.BlockSize, ReadOnly: cfg.ReadOnly}); err == nil {
			b = m
		}
	}
	return b, err
}
