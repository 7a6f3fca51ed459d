package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysfsRoot is where sysfs is mounted.
const sysfsRoot = "/sys"

// sysDev locates a block device (or partition) in sysfs.
type sysDev struct {
	dir       string // resolved /sys/devices/.../block/<disk>[/<partition>]
	disk      string // the whole disk's directory (dir itself for a disk)
	name      string // kernel name, e.g. "sda1"
	diskName  string // e.g. "sda"
	partition int    // partition number, 0 for a whole disk
}

// sysfsDevice finds the sysfs directory of the block device numbered dev.
func sysfsDevice(dev uint64) (*sysDev, error) {
	link := fmt.Sprintf("%s/dev/block/%d:%d", sysfsRoot, unix.Major(dev), unix.Minor(dev))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return nil, err
	}
	d := &sysDev{dir: dir, disk: dir, name: filepath.Base(dir)}
	if p := readAttr(filepath.Join(dir, "partition")); p != "" {
		d.partition, _ = strconv.Atoi(p)
		d.disk = filepath.Dir(dir)
	}
	d.diskName = filepath.Base(d.disk)
	return d, nil
}

// readAttr returns a sysfs attribute with surrounding white space removed,
// or "" if it cannot be read.
func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// attr reads an attribute relative to the whole disk's directory.
func (d *sysDev) attr(rel string) string { return readAttr(filepath.Join(d.disk, rel)) }

// rawAttr reads a binary attribute relative to the whole disk's directory.
func (d *sysDev) rawAttr(rel string) []byte {
	b, _ := os.ReadFile(filepath.Join(d.disk, rel))
	return b
}

func (d *sysDev) queueAttr(name string) string { return d.attr("queue/" + name) }

func (d *sysDev) queueUint(name string) uint64 {
	v, _ := strconv.ParseUint(d.queueAttr(name), 10, 64)
	return v
}

func (d *sysDev) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(d.disk, rel))
	return err == nil
}

// bus classifies the disk: which kind of device it is decides whether it
// can report health and how.
func (d *sysDev) bus() string {
	switch {
	case d.exists("loop"):
		return "loop"
	case d.exists("dm"):
		return "dm"
	case d.exists("md"):
		return "md"
	case strings.HasPrefix(d.diskName, "zram"):
		return "zram"
	case strings.HasPrefix(d.diskName, "nvme"):
		return "nvme"
	}
	if drv, err := os.Readlink(filepath.Join(d.disk, "device", "driver")); err == nil && filepath.Base(drv) == "virtio_blk" {
		return "virtio"
	}
	if d.exists("device/scsi_disk") || d.exists("device/scsi_device") {
		if d.attr("device/vendor") == "ATA" {
			return "sata" // libata presents SATA disks as SCSI with vendor "ATA"
		}
		return "scsi"
	}
	return "other"
}

// devName returns the device node of the whole disk, from its uevent.
func (d *sysDev) diskNode() string {
	for _, line := range strings.Split(d.attr("uevent"), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			return "/dev/" + name
		}
	}
	return "/dev/" + d.diskName
}

// identity fills the identity fields of info from sysfs.
func (d *sysDev) identity(info *Info) {
	info.Bus = d.bus()
	info.Vendor = d.attr("device/vendor")
	info.Model = d.attr("device/model")
	info.Firmware = firstNonEmpty(d.attr("device/firmware_rev"), d.attr("device/rev"))
	info.Serial = firstNonEmpty(d.attr("serial"), d.attr("device/serial"), vpdSerial(d.rawAttr("device/vpd_pg80")))
	info.WWN = firstNonEmpty(d.attr("wwid"), d.attr("device/wwid"))
	if info.Bus == "nvme" || info.Bus == "virtio" {
		info.Vendor = "" // a PCI vendor number, not a name
	}

	var id string
	switch {
	case info.WWN != "":
		id = "wwn:" + info.WWN
	case info.Serial != "":
		id = "serial:" + info.Model + ":" + info.Serial
	case d.attr("dm/uuid") != "":
		id = "dm:" + d.attr("dm/uuid")
	case d.attr("md/uuid") != "":
		id = "md:" + d.attr("md/uuid")
	case d.attr("loop/backing_file") != "":
		id = "loop:" + d.attr("loop/backing_file")
	default:
		id = "path:" + info.Path
	}
	if d.partition != 0 && !strings.HasPrefix(id, "path:") {
		id += "-part" + strconv.Itoa(d.partition)
	}
	info.ID = id
}

// vpdSerial extracts the serial number from SCSI VPD page 80h (Unit Serial
// Number, SPC-5 §7.7.19) as sysfs shows it: raw bytes.
func vpdSerial(b []byte) string {
	if len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	if n > len(b)-4 {
		n = len(b) - 4
	}
	return strings.TrimSpace(string(b[4 : 4+n]))
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
