// Package nvmecli prints what a controller returns to the admin commands
// of the host tool (Identify Controller and Namespace, the SMART / Health,
// Error, Firmware Slot, Commands Supported and Effects and ANA log pages,
// Get Features) the way nvme-cli 2.3 prints them, byte for byte: its
// normal output, its -H (human-readable) decoding and its -o json (json-c
// pretty printing: two-space indent, no space after the colon, nvme-cli's
// field order). Scripts written for nvme-cli read nvmeof's output.
//
// The fields of Identify Controller, Identify Namespace and the SMART /
// Health log are described once, in tables (fields.go): name, offset,
// width and format of each field serve the normal, the -H and the JSON
// printer. The other pages have few fields, or none in common between the
// outputs, and are written out.
//
// It also prints the fabrics commands' results: the discovery log
// (discover, as nvme-cli: normal and JSON), nvmeof list (its tables, and
// nvme list's JSON "Devices", simple and -v) and list-subsys, from the
// state the connection daemon publishes (initiator/hoststate).
//
// The package reads byte slices, nvmeof structures and hoststate records;
// it does no I/O but writing to the io.Writer it is given. The command
// (cmd/nvmeof) keeps the flags, the admin command (initiator/connd) and
// the choice of output.
package nvmecli

import "encoding/binary"

func le16(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
func le32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func le64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
