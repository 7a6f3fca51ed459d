// Package hoststate is the connection daemon's state store: the runtime
// directory of the host tool, one directory per connected controller
// (subsystem) named like the Linux character device (nvme0, nvme1, ...),
// with the state file list and list-subsys read, written atomically by
// the daemon.
package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The runtime directory holds one directory per controller, named like the
// Linux character device (nvme0, nvme1, ...):
//
//	RUNDIR/nvme0/state.json  what list shows (written by the daemon)
//	RUNDIR/nvme0/ctl.sock    the daemon's control socket
//	RUNDIR/nvme0/dev/        the FUSE mount: one file per namespace (n1, n2, ...)
//	RUNDIR/nvme0.log         the daemon's log (kept after disconnect)

// DefaultDir is the runtime directory when none is given:
// $NVMEOF_STATE_DIR, else for a user other than root
// $XDG_RUNTIME_DIR/nvmeof, else /run/nvmeof.
func DefaultDir() string {
	if d := os.Getenv("NVMEOF_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() != 0 {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			return filepath.Join(d, "nvmeof")
		}
	}
	return "/run/nvmeof"
}

// Store is a runtime directory.
type Store struct {
	Dir string
}

// Namespace is one namespace of a controller as list shows it.
type Namespace struct {
	NSID      uint32 `json:"nsid"`
	Size      int64  `json:"size"`
	BlockSize int    `json:"block_size"`
	UUID      string `json:"uuid,omitempty"`
	NGUID     string `json:"nguid,omitempty"`
	File      string `json:"device_file"`
	Loop      string `json:"loop,omitempty"`
	Mount     string `json:"mount,omitempty"`
	FSType    string `json:"fstype,omitempty"`
	// Gone marks a namespace the target removed whose loop device or
	// mount is still here (disconnect takes them down).
	Gone bool `json:"removed,omitempty"`
}

// Controller is a controller as list shows it.
type Controller struct {
	Device     string      `json:"device"`
	PID        int         `json:"pid"`
	State      string      `json:"state"`
	Transport  string      `json:"transport"`
	Address    string      `json:"address"`
	SubNQN     string      `json:"subsysnqn"`
	HostNQN    string      `json:"hostnqn"`
	HostID     string      `json:"hostid"`
	CNTLID     uint16      `json:"cntlid"`
	Model      string      `json:"model,omitempty"`
	Serial     string      `json:"serial,omitempty"`
	Firmware   string      `json:"firmware,omitempty"`
	IOQueues   int         `json:"io_queues"`
	QueueSize  int         `json:"queue_size"`
	CRC        bool        `json:"mpa_crc"`
	Reconnects int         `json:"reconnects"`
	LastError  string      `json:"last_error,omitempty"`
	Since      time.Time   `json:"since"`
	Log        string      `json:"log"`
	Namespaces []Namespace `json:"namespaces"`
	// IOPolicy and Paths: the subsystem's multipath view (nvme
	// list-subsys). The fields above are those of the first path.
	IOPolicy string `json:"iopolicy,omitempty"`
	Paths    []Path `json:"paths,omitempty"`
}

// Path is one path (controller) of the device's subsystem.
type Path struct {
	Address    string         `json:"address"`
	CNTLID     uint16         `json:"cntlid"`
	State      string         `json:"state"`
	Reconnects int            `json:"reconnects"`
	ANA        []ANANamespace `json:"ana,omitempty"`
	Groups     []ANAGroup     `json:"ana_groups,omitempty"`
}

// ANANamespace is a namespace's ANA state through one path.
type ANANamespace struct {
	NSID  uint32 `json:"nsid"`
	State string `json:"state"`
}

// ANAGroup is one ANA group of a path's ANA log.
type ANAGroup struct {
	ID    uint32   `json:"anagrpid"`
	State string   `json:"state"`
	NSIDs []uint32 `json:"nsids,omitempty"`
}

// InstanceDir is the directory of controller dev.
func (s Store) InstanceDir(dev string) string { return filepath.Join(s.Dir, dev) }

// Claim creates the lowest free nvmeN directory and returns its name.
func (s Store) Claim() (string, error) {
	dir := s.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i := 0; i < 10000; i++ {
		dev := "nvme" + strconv.Itoa(i)
		err := os.Mkdir(filepath.Join(dir, dev), 0o755)
		if err == nil {
			return dev, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
		// A directory left by a daemon that died: reuse it if its
		// process is gone.
		if st, err := s.Read(dev); err == nil && !ProcessAlive(st.PID) && st.PID != 0 {
			if s.Remove(dev) == nil && os.Mkdir(filepath.Join(dir, dev), 0o755) == nil {
				return dev, nil
			}
		}
	}
	return "", fmt.Errorf("no free controller instance in %s", dir)
}

// Remove removes controller dev's directory (not its log).
func (s Store) Remove(dev string) error {
	d := s.InstanceDir(dev)
	_ = os.Remove(filepath.Join(d, "dev")) // an unmounted FUSE mount point
	return os.RemoveAll(d)
}

// Write replaces the state file of st.Device atomically. Each write has its own
// temporary file, so two writers never rename each other's file away.
func (s Store) Write(st *Controller) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	d := s.InstanceDir(st.Device)
	f, err := os.CreateTemp(d, ".state.json.*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(d, "state.json"))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// Read reads the state file of controller dev.
func (s Store) Read(dev string) (*Controller, error) {
	b, err := os.ReadFile(filepath.Join(s.InstanceDir(dev), "state.json"))
	if err != nil {
		return nil, err
	}
	st := new(Controller)
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("%s: %w", dev, err)
	}
	return st, nil
}

// Instances lists the controller directories, in device order.
func (s Store) Instances() []string {
	ents, _ := os.ReadDir(s.Dir)
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "nvme") {
			if _, err := strconv.Atoi(e.Name()[4:]); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i][4:])
		b, _ := strconv.Atoi(out[j][4:])
		return a < b
	})
	return out
}

// ProcessAlive reports whether pid runs.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// ConnectedTo returns the device of a live controller of nqn at addr
// (its first path or another one).
func (s Store) ConnectedTo(nqn, addr string) string {
	for _, dev := range s.Instances() {
		st, err := s.Read(dev)
		if err != nil || st.SubNQN != nqn || !ProcessAlive(st.PID) {
			continue
		}
		if st.Address == addr {
			return dev
		}
		for _, p := range st.Paths {
			if p.Address == addr {
				return dev
			}
		}
	}
	return ""
}

// SubsystemDevice returns the device of a live daemon connected to
// subsystem nqn (through any port), or "".
func (s Store) SubsystemDevice(nqn string) string {
	for _, dev := range s.Instances() {
		st, err := s.Read(dev)
		if err == nil && st.SubNQN == nqn && ProcessAlive(st.PID) {
			return dev
		}
	}
	return ""
}
