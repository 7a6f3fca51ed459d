package backend

import (
	"bytes"
	"fmt"
	"os"

	"github.com/dswarbrick/smart/drivedb"
	"github.com/dswarbrick/smart/nvme"
	"github.com/dswarbrick/smart/scsi"
)

// HealthReport returns a human-readable health report of a SATA, SAS or
// NVMe disk, as printed by github.com/dswarbrick/smart: identity, and ATA
// SMART attributes or the NVMe SMART log. Other devices return an error
// matching ErrNotSupported that says why.
//
// The library is experimental: its output format is not stable, and this
// method recovers from its panics (returning them as errors). It passes
// buffer addresses to ioctls inside structures without pinning them, which
// the Go rules do not guarantee to be safe; Health, which does not use it,
// is the robust way to read counters.
func (b *Block) HealthReport() (string, error) {
	if err := b.io.acquire(); err != nil {
		return "", err
	}
	b.io.release()
	bus := b.info.Bus
	if bus != "nvme" && bus != "sata" && bus != "scsi" {
		r, ok := noHealthReasons[bus]
		if !ok {
			r = noHealthReasons["other"]
		}
		return "", fmt.Errorf("backend block %s: health report: %s: %w", b.io.path, r, ErrNotSupported)
	}
	db, err := b.loadDriveDB()
	if err != nil {
		return "", err
	}

	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	node := b.dev.diskNode()
	var out bytes.Buffer
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("smart library panicked: %v", r)
			}
		}()
		var d scsi.Device
		switch bus {
		case "nvme":
			d = nvme.NewNVMeDevice(node)
		case "sata":
			d = &scsi.SATDevice{SCSIDevice: scsi.SCSIDevice{Name: node}}
		default:
			d = &scsi.SCSIDevice{Name: node}
		}
		if err := d.Open(); err != nil {
			return err
		}
		defer d.Close()
		return d.PrintSMART(db, &out)
	}()
	if err != nil {
		return out.String(), fmt.Errorf("backend block %s: health report of %s: %w", b.io.path, node, err)
	}
	return out.String(), nil
}

// loadDriveDB reads the configured drive database, or builds the built-in
// one. It is loaded for every report because the library's lookup modifies
// the database.
func (b *Block) loadDriveDB() (*drivedb.DriveDb, error) {
	if b.driveDB == "" {
		return builtinDriveDB(), nil
	}
	// OpenDriveDb returns an empty database, not an error, for a missing
	// file; check first so that a wrong path is reported.
	if _, err := os.Stat(b.driveDB); err != nil {
		return nil, fmt.Errorf("backend block %s: drive database: %w", b.io.path, err)
	}
	db, err := drivedb.OpenDriveDb(b.driveDB)
	if err != nil {
		return nil, fmt.Errorf("backend block %s: drive database %s: %w", b.io.path, b.driveDB, err)
	}
	return &db, nil
}

// builtinDriveDB names the ATA SMART attributes most drives share and says
// how to decode their raw values (conversion names of the smart library).
func builtinDriveDB() *drivedb.DriveDb {
	p := map[string]drivedb.AttrConv{}
	for _, a := range [...]struct{ id, name, conv string }{
		{"1", "Raw_Read_Error_Rate", "raw48"},
		{"3", "Spin_Up_Time", "raw16(avg16)"},
		{"4", "Start_Stop_Count", "raw48"},
		{"5", "Reallocated_Sector_Ct", "raw16(raw16)"},
		{"7", "Seek_Error_Rate", "raw48"},
		{"9", "Power_On_Hours", "raw24(raw8)"},
		{"10", "Spin_Retry_Count", "raw48"},
		{"12", "Power_Cycle_Count", "raw48"},
		{"174", "Unexpect_Power_Loss_Ct", "raw48"},
		{"177", "Wear_Leveling_Count", "raw48"},
		{"187", "Reported_Uncorrect", "raw48"},
		{"188", "Command_Timeout", "raw48"},
		{"190", "Airflow_Temperature_Cel", "tempminmax"},
		{"192", "Power-Off_Retract_Count", "raw48"},
		{"193", "Load_Cycle_Count", "raw48"},
		{"194", "Temperature_Celsius", "tempminmax"},
		{"196", "Reallocated_Event_Count", "raw16(raw16)"},
		{"197", "Current_Pending_Sector", "raw48"},
		{"198", "Offline_Uncorrectable", "raw48"},
		{"199", "UDMA_CRC_Error_Count", "raw48"},
		{"233", "Media_Wearout_Indicator", "raw48"},
		{"241", "Total_LBAs_Written", "raw48"},
		{"242", "Total_LBAs_Read", "raw48"},
	} {
		p[a.id] = drivedb.AttrConv{Name: a.name, Conv: a.conv}
	}
	return &drivedb.DriveDb{Drives: []drivedb.DriveModel{{Family: "DEFAULT", Presets: p}}}
}
