package nvmeof

// Sizes of the fixed wire structures.
const (
	// SQESize is the size of a submission queue entry (NVMe command): 64 bytes
	// (CC.IOSQES = 6; Linux NVME_NVM_IOSQES, protocol.md §8.2).
	SQESize = 64
	// CQESize is the size of a completion queue entry: 16 bytes (CC.IOCQES = 4;
	// Linux NVME_NVM_IOCQES). The NVMe/RDMA response capsule is exactly one CQE.
	CQESize = 16
	// SGLDescSize is the size of an SGL descriptor (DPTR, SQE bytes 24..39).
	SGLDescSize = 16
	// ConnectDataSize is the size of the Fabrics Connect data: 1024 bytes
	// (struct nvmf_connect_data; nvmet requires exactly this transfer length).
	ConnectDataSize = 1024
	// IdentifyDataSize is the size of every Identify data structure: 4096 bytes
	// (Linux NVME_IDENTIFY_DATA_SIZE; nvmet requires this exact SGL length).
	IdentifyDataSize = 4096
	// DiscoveryLogHeaderSize is the size of the discovery log page header
	// (struct nvmf_disc_rsp_page_hdr without entries): 1024 bytes.
	DiscoveryLogHeaderSize = 1024
	// DiscoveryLogEntrySize is the size of one discovery log page entry
	// (struct nvmf_disc_rsp_page_entry): 1024 bytes.
	DiscoveryLogEntrySize = 1024
	// SMARTLogSize is the size of the SMART / Health Information log page (LID 0x02).
	SMARTLogSize = 512
	// FirmwareSlotLogSize is the size of the Firmware Slot Information log page (LID 0x03).
	FirmwareSlotLogSize = 512
	// ErrorLogEntrySize is the size of one Error Information log entry (LID 0x01).
	ErrorLogEntrySize = 64
	// ChangedNSListSize is the size of the Changed Namespace List log page (LID 0x04).
	ChangedNSListSize = 4096
	// MaxChangedNamespaces is the number of NSIDs the Changed Namespace List holds
	// (Linux NVME_MAX_CHANGED_NAMESPACES).
	MaxChangedNamespaces = ChangedNSListSize / 4
	// CommandEffectsLogSize is the size of the Commands Supported and Effects log (LID 0x05).
	CommandEffectsLogSize = 4096
	// DSMRangeSize is the size of one Dataset Management range.
	DSMRangeSize = 16
	// MaxDSMRanges is the largest number of ranges in one Dataset Management
	// command (NR is 8 bits, 0's based; Linux NVME_DSM_MAX_RANGES).
	MaxDSMRanges = 256
	// MaxNSListEntries is the number of NSIDs in an Identify active namespace
	// list (CNS 0x02): 4096/4.
	MaxNSListEntries = IdentifyDataSize / 4
	// HostBehaviorSize is the size of the Host Behavior Support feature data (FID 0x16).
	HostBehaviorSize = 512
	// TimestampSize is the size of the Timestamp feature data (FID 0x0E).
	TimestampSize = 8
)

// Sizes of string fields and names.
const (
	// NQNFieldSize is the size of every NQN field on the wire (SUBNQN, HOSTNQN,
	// Identify SUBNQN): 256 bytes, NUL-terminated (Linux NVMF_NQN_FIELD_LEN).
	NQNFieldSize = 256
	// NQNMaxLen is the longest NQN in bytes, without the terminating NUL:
	// NVMe Base 2.0 §4.5 "NVMe Qualified Names" (Linux NVMF_NQN_SIZE).
	NQNMaxLen = 223
	// TRSVCIDSize is the size of the discovery log TRSVCID field (Linux NVMF_TRSVCID_SIZE).
	TRSVCIDSize = 32
	// TRADDRSize is the size of the discovery log TRADDR field (Linux NVMF_TRADDR_SIZE).
	TRADDRSize = 256
)

// Queue sizes and limits used by Linux (protocol.md §8.6).
const (
	// AdminQueueDepth is the admin queue size Linux uses on fabrics: 32
	// entries, Connect SQSIZE 31 (include/linux/nvme.h NVME_AQ_DEPTH).
	AdminQueueDepth = 32
	// AdminMaxSQSize is the largest 0's based admin SQSIZE nvmet accepts in
	// the RDMA CM request (HSQSIZE+1 <= NVME_AQ_DEPTH).
	AdminMaxSQSize = AdminQueueDepth - 1
	// aerCommandID is the command identifier tag the Linux host uses for its
	// Asynchronous Event Request (admin tags >= NVME_AQ_BLK_MQ_DEPTH = 31 are AENs).
	aerCommandID = AdminQueueDepth - 1
	// DefaultIOQueueSize is the host's default I/O queue size (queue_size
	// option; drivers/nvme/host/fabrics.h NVMF_DEF_QUEUE_SIZE).
	DefaultIOQueueSize = 128
	// MinIOQueueSize is the smallest queue_size the Linux host accepts
	// (drivers/nvme/host/fabrics.h NVMF_MIN_QUEUE_SIZE).
	MinIOQueueSize = 16
	// MaxIOQueueSize is the largest queue_size the Linux host accepts
	// (drivers/nvme/host/fabrics.h NVMF_MAX_QUEUE_SIZE).
	MaxIOQueueSize = 1024
	// RDMAMaxQueueSize is the I/O queue size newer Linux hosts and nvmet clamp
	// to on RDMA (include/linux/nvme-rdma.h NVME_RDMA_MAX_QUEUE_SIZE).
	RDMAMaxQueueSize = 256
)

// nvmet-rdma defaults (drivers/nvme/target/rdma.c; protocol.md §8.6).
const (
	// NvmetDefaultInlineDataSize is nvmet-rdma's default in-capsule data size
	// (NVMET_RDMA_DEFAULT_INLINE_DATA_SIZE = PAGE_SIZE).
	NvmetDefaultInlineDataSize = 4096
	// NvmetMaxInlineDataSize is nvmet-rdma's largest in-capsule data size
	// (NVMET_RDMA_MAX_INLINE_DATA_SIZE = max(16 KiB, PAGE_SIZE)).
	NvmetMaxInlineDataSize = 16384
	// nvmetMDTS is nvmet-rdma's MDTS: 2^8 pages of 4 KiB = 1 MiB
	// (NVMET_RDMA_MAX_MDTS; 5 with T10-PI metadata).
	nvmetMDTS = 8
	// NvmetKAS is nvmet's Identify Controller KAS: 10 units of 100 ms
	// (drivers/nvme/target/nvmet.h NVMET_KAS).
	NvmetKAS = 10
	// DefaultKATO is the Linux host's default keep-alive timeout in seconds
	// (NVME_DEFAULT_KATO); the admin Connect carries KATO*1000 ms.
	DefaultKATO = 5
	// IORCSZ is the I/O queue response capsule size in 16-byte units: a
	// response is exactly one CQE (nvmet, protocol.md §10.2).
	IORCSZ = CQESize / 16
	// ICDOFF is the in-capsule data offset in 16-byte units; the Linux RDMA
	// host rejects any value but 0 (drivers/nvme/host/rdma.c).
	ICDOFF = 0
	// MSDBD is the maximum number of SGL data block descriptors per command
	// (nvmet reports 1; Linux hosts use one descriptor).
	MSDBD = 1
	// DefaultPort is the IANA-assigned NVMe/RDMA port (Linux NVME_RDMA_IP_PORT).
	DefaultPort = 4420
)

// IOCCSZ returns the I/O queue command capsule size in 16-byte units for an
// in-capsule data size of inline bytes: (64 + inline) / 16 (NVMe-oF 1.1
// §4.1; nvmet: 260 for 4 KiB). The Linux host requires IOCCSZ >= 4.
func IOCCSZ(inline int) uint32 {
	if inline < 0 {
		inline = 0
	}
	return uint32((SQESize + inline) / 16)
}

// InlineDataSize returns the in-capsule data size implied by an IOCCSZ
// value: IOCCSZ*16 - 64, or 0 if IOCCSZ is smaller than a bare SQE.
func InlineDataSize(ioccsz uint32) int {
	if ioccsz < SQESize/16 {
		return 0
	}
	return int(ioccsz)*16 - SQESize
}

// Special identifier values.
const (
	// NSIDAll is the broadcast namespace identifier (Linux NVME_NSID_ALL).
	NSIDAll uint32 = 0xFFFFFFFF
	// CNTLIDDynamic is the Connect data CNTLID of an admin connect to a
	// dynamic controller (Linux NVME_CNTLID_DYNAMIC).
	CNTLIDDynamic uint16 = 0xFFFF
	// CNTLIDMin and CNTLIDMax bound the controller IDs a target may assign
	// (Linux NVME_CNTLID_MIN, NVME_CNTLID_MAX).
	CNTLIDMin uint16 = 1
	CNTLIDMax uint16 = 0xFFEF
)
