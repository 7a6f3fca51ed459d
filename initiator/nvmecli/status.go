package nvmecli

// libnvme 1.3's nvme_status_to_string(status, false) (src/nvme/util.c), as
// nvme-cli 2.3's error-log prints a status: the text by status code type
// and code, "unrecognized" for a code its tables lack, "Unknown status"
// for a reserved code type.

var genericStatusNames = map[uint8]string{
	0x00: "Successful Completion: The command completed without error",
	0x01: "Invalid Command Opcode: A reserved coded value or an unsupported value in the command opcode field",
	0x02: "Invalid Field in Command: A reserved coded value or an unsupported value in a defined field",
	0x03: "Command ID Conflict: The command identifier is already in use",
	0x04: "Data Transfer Error: Transferring the data or metadata associated with a command experienced an error",
	0x05: "Commands Aborted due to Power Loss Notification: Indicates that the command was aborted due to a power loss notification",
	0x06: "Internal Error: The command was not completed successfully due to an internal error",
	0x07: "Command Abort Requested: The command was aborted due to an Abort command",
	0x08: "Command Aborted due to SQ Deletion: The command was aborted due to a Delete I/O Submission Queue",
	0x09: "Command Aborted due to Failed Fused Command: The command was aborted due to the other command in a fused operation failing",
	0x0a: "Command Aborted due to Missing Fused Command: The fused command was aborted due to the adjacent submission queue entry not containing a fused command",
	0x0b: "Invalid Namespace or Format: The namespace or the format of that namespace is invalid",
	0x0c: "Command Sequence Error: The command was aborted due to a protocol violation in a multi- command sequence",
	0x0d: "Invalid SGL Segment Descriptor: The command includes an invalid SGL Last Segment or SGL Segment descriptor",
	0x0e: "Invalid Number of SGL Descriptors: There is an SGL Last Segment descriptor or an SGL Segment descriptor in a location other than the last descriptor of a segment based on the length indicated",
	0x0f: "Data SGL Length Invalid: The length of a Data SGL is too short or too long and the controller does not support SGL transfers longer than the amount of data to be transferred",
	0x10: "Metadata SGL Length Invalid: The length of a Metadata SGL is too short or too long and the controller does not support SGL transfers longer than the amount of data to be transferred",
	0x11: "SGL Descriptor Type Invalid: The type of an SGL Descriptor is a type that is not supported by the controller",
	0x12: "Invalid Use of Controller Memory Buffer: The attempted use of the Controller Memory Buffer is not supported by the controller",
	0x13: "PRP Offset Invalid: The Offset field for a PRP entry is invalid",
	0x14: "Atomic Write Unit Exceeded: The length specified exceeds the atomic write unit size",
	0x15: "Operation Denied: The command was denied due to lack of access rights",
	0x16: "SGL Offset Invalid: The offset specified in a descriptor is invalid",
	0x18: "Host Identifier Inconsistent Format: The NVM subsystem detected the simultaneous use of 64- bit and 128-bit Host Identifier values on different controllers",
	0x19: "Keep Alive Timer Expired: The Keep Alive Timer expired",
	0x1a: "Keep Alive Timeout Invalid: The Keep Alive Timeout value specified is invalid",
	0x1b: "Command Aborted due to Preempt and Abort: The command was aborted due to a Reservation Acquire command",
	0x1c: "Sanitize Failed: The most recent sanitize operation failed and no recovery action has been successfully completed",
	0x1d: "Sanitize In Progress: The requested function is prohibited while a sanitize operation is in progress",
	0x1e: "SGL Data Block Granularity Invalid: The Address alignment or Length granularity for an SGL Data Block descriptor is invalid",
	0x1f: "Command Not Supported for Queue in CMB: The controller does not support Submission Queue in the Controller Memory Buffer or Completion Queue in the Controller Memory Buffer",
	0x20: "Namespace is Write Protected: The command is prohibited while the namespace is write protected",
	0x21: "Command Interrupted: Command processing was interrupted and the controller is unable to successfully complete the command",
	0x22: "Transient Transport Error: A transient transport error was detected",
	0x23: "Command Prohibited by Command and Feature Lockdown: The command was aborted due to command execution being prohibited by the Command and Feature Lockdown",
	0x24: "Admin Command Media Not Ready: The Admin command requires access to media and the media is not ready",
	0x80: "LBA Out of Range: The command references an LBA that exceeds the size of the namespace",
	0x81: "Capacity Exceeded: Execution of the command has caused the capacity of the namespace to be exceeded",
	0x82: "Namespace Not Ready: The namespace is not ready to be accessed",
	0x83: "Reservation Conflict: The command was aborted due to a conflict with a reservation held on the accessed namespace",
	0x84: "Format In Progress: A Format NVM command is in progress on the namespace",
}

// cmdSpecificStatusNames: libnvme's cmd_spec_status up to 0x2d (its
// discovery-controller codes after that are left out: a discovery
// controller has no error log here), then the NVM command set's from 0x80.
var cmdSpecificStatusNames = map[uint8]string{
	0x00: "Completion Queue Invalid: The Completion Queue identifier specified in the command does not exist",
	0x01: "Invalid Queue Identifier: The creation of the I/O Completion Queue failed due to an invalid queue identifier specified as part of the command",
	0x02: "Invalid Queue Size: The host attempted to create an I/O Completion Queue with an invalid number of entries",
	0x03: "Abort Command Limit Exceeded: The number of concurrently outstanding Abort commands has exceeded the limit indicated in the Identify Controller data structure",
	0x04: "Abort Command Is Missing: The abort command is missing",
	0x05: "Asynchronous Event Request Limit Exceeded: The number of concurrently outstanding Asynchronous Event Request commands has been exceeded",
	0x06: "Invalid Firmware Slot: The firmware slot indicated is invalid or read only",
	0x07: "Invalid Firmware Image: The firmware image specified for activation is invalid and not loaded by the controller",
	0x08: "Invalid Interrupt Vector: The creation of the I/O Completion Queue failed due to an invalid interrupt vector specified as part of the command",
	0x09: "Invalid Log Page: The log page indicated is invalid",
	0x0a: "Invalid Format: The LBA Format specified is not supported",
	0x0b: "Firmware Activation Requires Conventional Reset: The firmware commit was successful, however, activation of the firmware image requires a conventional reset",
	0x0c: "Invalid Queue Deletion: Invalid I/O Completion Queue specified to delete",
	0x0d: "Feature Identifier Not Saveable: The Feature Identifier specified does not support a saveable value",
	0x0e: "Feature Not Changeable: The Feature Identifier is not able to be changed",
	0x0f: "Feature Not Namespace Specific: The Feature Identifier specified is not namespace specific",
	0x10: "Firmware Activation Requires NVM Subsystem Reset: The firmware commit was successful, however, activation of the firmware image requires an NVM Subsystem",
	0x11: "Firmware Activation Requires Controller Level Reset: The firmware commit was successful; however, the image specified does not support being activated without a reset",
	0x12: "Firmware Activation Requires Maximum Time Violation: The image specified if activated immediately would exceed the Maximum Time for Firmware Activation (MTFA) value reported in Identify Controller",
	0x13: "Firmware Activation Prohibited: The image specified is being prohibited from activation by the controller for vendor specific reasons",
	0x14: "Overlapping Range: The downloaded firmware image has overlapping ranges",
	0x15: "Namespace Insufficient Capacity: Creating the namespace requires more free space than is currently available",
	0x16: "Namespace Identifier Unavailable: The number of namespaces supported has been exceeded",
	0x18: "Namespace Already Attached: The controller is already attached to the namespace specified",
	0x19: "Namespace Is Private: The namespace is private and is already attached to one controller",
	0x1a: "Namespace Not Attached: The request to detach the controller could not be completed because the controller is not attached to the namespace",
	0x1b: "Thin Provisioning Not Supported: Thin provisioning is not supported by the controller",
	0x1c: "Controller List Invalid: The controller list provided contains invalid controller ids",
	0x1d: "Device Self-test In Progress: The controller or NVM subsystem already has a device self-test operation in process",
	0x1e: "Boot Partition Write Prohibited: The command tried to modify a locked Boot Partition",
	0x1f: "Invalid Controller Identifier: An invalid controller id was specified",
	0x20: "Invalid Secondary Controller State: The requested secondary controller action is invalid based on the secondary and primary controllers current states",
	0x21: "Invalid Number of Controller Resources: The specified number of Flexible Resources is invalid",
	0x22: "Invalid Resource Identifier: At least one of the specified resource identifiers was invalid",
	0x23: "Sanitize Prohibited While Persistent Memory Region is Enabled",
	0x24: "ANA Group Identifier Invalid: The specified ANA Group Identifier (ANAGRPID) is not supported in the submitted command",
	0x25: "ANA Attach Failed: The controller is not attached to the namespace as a result of an ANA condition",
	0x26: "Insufficient Capacity: Requested operation requires more free space than is currently available",
	0x27: "Namespace Attachment Limit Exceeded: Attaching the ns to a controller causes max number of ns attachments allowed to be exceeded",
	0x28: "Prohibition of Command Execution Not Supported",
	0x29: "The I/O command set is not supported",
	0x2a: "The I/O command set is not enabled",
	0x2b: "The I/O command set combination is rejected",
	0x2c: "The I/O command set is invalid",
	0x2d: "Identifier Unavailable: The number of Endurance Groups or NVM Sets supported has been exceeded",
	0x80: "Conflicting Attributes: The attributes specified in the command are conflicting",
	0x81: "Invalid Protection Information: The command's Protection Information Field settings are invalid for the namespace's Protection Information format",
	0x82: "Attempted Write to Read Only Range: The LBA range specified contains read-only blocks",
}

var mediaStatusNames = map[uint8]string{
	0x80: "Write Fault: The write data could not be committed to the media",
	0x81: "Unrecovered Read Error: The read data could not be recovered from the media",
	0x82: "End-to-end Guard Check Error: The command was aborted due to an end-to-end guard check failure",
	0x83: "End-to-end Application Tag Check Error: The command was aborted due to an end-to-end application tag check failure",
	0x84: "End-to-end Reference Tag Check Error: The command was aborted due to an end-to-end reference tag check failure",
	0x85: "Compare Failure: The command failed due to a miscompare during a Compare command",
	0x86: "Access Denied: Access to the namespace and/or LBA range is denied due to lack of access rights",
	0x87: "Deallocated or Unwritten Logical Block: The command failed due to an attempt to read from or verify an LBA range containing a deallocated or unwritten logical block",
	0x88: "End-to-End Storage Tag Check Error: The command was aborted due to an end-to-end storage tag check failure",
}

var pathStatusNames = map[uint8]string{
	0x00: "Internal Path Error: An internal error specific to the controller processing the command prevented completion",
	0x01: "Asymmetric Access Persistent Loss: The controller is in a persistent loss state with the requested namespace",
	0x02: "Asymmetric Access Inaccessible: The controller is in an inaccessible state with the requested namespace",
	0x03: "Asymmetric Access Transition: The controller is currently transitioning states with the requested namespace",
	0x60: "Controller Pathing Error: A pathing error was detected by the controller",
	0x70: "Host Pathing Error: A pathing error was detected by the host",
	0x71: "Command Aborted By Host: The command was aborted as a result of host action",
}

// StatusString is nvme_status_to_string(status, false) of an NVMe status
// (the CQE status field without the phase tag: SC bits 7:0, SCT 10:8).
func StatusString(status uint16) string {
	sc, sct := uint8(status), status>>8&7
	var names map[uint8]string
	switch sct {
	case 0:
		names = genericStatusNames
	case 1:
		names = cmdSpecificStatusNames
	case 2:
		names = mediaStatusNames
	case 3:
		names = pathStatusNames
	case 7:
		return "Vendor Specific Status"
	default:
		return "Unknown status"
	}
	if s, ok := names[sc]; ok {
		return s
	}
	return "unrecognized"
}

// trtypeString is nvme-cli 2.3's nvme_trtype_to_string of an error log
// entry's transport type.
func trtypeString(t uint8) string {
	switch t {
	case 0:
		return "The transport type is not indicated or the error is not transport related."
	case 1:
		return "RDMA Transport error."
	case 2:
		return "Fibre Channel Transport error."
	case 3:
		return "TCP Transport error."
	case 254:
		return "Intra-host Transport error."
	}
	return "Reserved"
}
