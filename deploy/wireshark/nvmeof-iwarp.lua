-- nvmeof-iwarp.lua: NVMe over Fabrics (RDMA transport binding) over iWARP
-- for Wireshark and tshark.
--
-- Wireshark dissects iWARP (MPA, DDP, RDMAP) itself, and NVMe-oF over
-- InfiniBand/RoCE, but it does not hand RDMAP Send payloads over iWARP to
-- its NVMe-oF dissector. This heuristic sub-dissector of the RDMAP payload
-- decodes the capsules: command capsules (64-byte SQEs: opcode, CID, NSID,
-- Fabrics command type and Connect's QID, SLBA and NLB of reads and
-- writes, SGL descriptor) and response capsules (16-byte CQEs: CID, SQ
-- head, status), and the NVMe/RDMA CM request in the MPA Request (its QID
-- tells admin from I/O commands).
--
--   tshark -X lua_script:nvmeof-iwarp.lua -o tcp.try_heuristic_first:TRUE -r trace.pcap
--
-- (try_heuristic_first: port 4420 is NVMe/TCP's too; the iWARP MPA
-- dissector is a TCP heuristic.) Or copy the file to
-- ~/.local/lib/wireshark/plugins/.

local p = Proto("nvmeof_iwarp", "NVMe-oF over iWARP")

local admin_ops = {
  [0x00] = "Delete I/O SQ", [0x01] = "Create I/O SQ", [0x02] = "Get Log Page", [0x04] = "Delete I/O CQ",
  [0x05] = "Create I/O CQ", [0x06] = "Identify", [0x08] = "Abort", [0x09] = "Set Features",
  [0x0a] = "Get Features", [0x0c] = "Asynchronous Event Request", [0x0d] = "Namespace Management",
  [0x10] = "Firmware Commit", [0x11] = "Firmware Image Download", [0x15] = "Namespace Attachment",
  [0x18] = "Keep Alive", [0x7f] = "Fabrics",
}
local io_ops = {
  [0x00] = "Flush", [0x01] = "Write", [0x02] = "Read", [0x04] = "Write Uncorrectable", [0x05] = "Compare",
  [0x08] = "Write Zeroes", [0x09] = "Dataset Management", [0x0d] = "Reservation Register",
  [0x0e] = "Reservation Report", [0x11] = "Reservation Acquire", [0x15] = "Reservation Release", [0x7f] = "Fabrics",
}
local fctypes = {
  [0x00] = "Property Set", [0x01] = "Connect", [0x04] = "Property Get", [0x05] = "Authentication Send",
  [0x06] = "Authentication Receive", [0x08] = "Disconnect",
}
local sct_names = { [0] = "Generic", [1] = "Command Specific", [2] = "Media and Data Integrity", [3] = "Path Related", [7] = "Vendor Specific" }

local f = {
  kind     = ProtoField.string("nvmeof_iwarp.capsule", "Capsule"),
  queue    = ProtoField.string("nvmeof_iwarp.queue", "Queue"),
  opcode   = ProtoField.uint8("nvmeof_iwarp.sqe.opcode", "Opcode", base.HEX),
  cmd      = ProtoField.string("nvmeof_iwarp.sqe.command", "Command"),
  flags    = ProtoField.uint8("nvmeof_iwarp.sqe.flags", "Flags", base.HEX),
  cid      = ProtoField.uint16("nvmeof_iwarp.cid", "Command Identifier", base.HEX),
  nsid     = ProtoField.uint32("nvmeof_iwarp.sqe.nsid", "Namespace ID", base.DEC),
  fctype   = ProtoField.uint8("nvmeof_iwarp.sqe.fctype", "Fabrics Command Type", base.HEX),
  qid      = ProtoField.uint16("nvmeof_iwarp.connect.qid", "Connect QID", base.DEC),
  sqsize   = ProtoField.uint16("nvmeof_iwarp.connect.sqsize", "Connect SQSIZE", base.DEC),
  kato     = ProtoField.uint32("nvmeof_iwarp.connect.kato", "Connect KATO (ms)", base.DEC),
  slba     = ProtoField.uint64("nvmeof_iwarp.sqe.slba", "Starting LBA", base.DEC),
  nlb      = ProtoField.uint16("nvmeof_iwarp.sqe.nlb", "Number of Logical Blocks (0's based)", base.DEC),
  sgl_type = ProtoField.uint8("nvmeof_iwarp.sgl.type", "SGL Descriptor Type", base.HEX),
  sgl_addr = ProtoField.uint64("nvmeof_iwarp.sgl.addr", "SGL Address", base.HEX),
  sgl_len  = ProtoField.uint32("nvmeof_iwarp.sgl.length", "SGL Length", base.DEC),
  sgl_key  = ProtoField.uint32("nvmeof_iwarp.sgl.key", "SGL Key (STag)", base.HEX),
  incap    = ProtoField.uint32("nvmeof_iwarp.incapsule_len", "In-capsule Data Length", base.DEC),
  dw0      = ProtoField.uint32("nvmeof_iwarp.cqe.dw0", "Command Specific DW0", base.HEX),
  sqhd     = ProtoField.uint16("nvmeof_iwarp.cqe.sqhd", "SQ Head Pointer", base.DEC),
  sqid     = ProtoField.uint16("nvmeof_iwarp.cqe.sqid", "SQ Identifier", base.DEC),
  status   = ProtoField.uint16("nvmeof_iwarp.cqe.status", "Status (SCT<<8|SC)", base.HEX),
  stname   = ProtoField.string("nvmeof_iwarp.cqe.status_text", "Status"),
  dnr      = ProtoField.bool("nvmeof_iwarp.cqe.dnr", "Do Not Retry"),
}
p.fields = f

-- The QID of each connection, learnt from its Connect (key: the TCP
-- endpoints, either order).
local qids = {}
local function conv_key(pinfo)
  local a = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
  local b = tostring(pinfo.dst) .. ":" .. tostring(pinfo.dst_port)
  if a < b then return a .. "-" .. b end
  return b .. "-" .. a
end

local function sqe(tvb, pinfo, tree)
  local t = tree:add(p, tvb(), "NVMe-oF Command Capsule")
  local opc = tvb(0, 1):uint()
  local cid = tvb(2, 2):le_uint()
  local nsid = tvb(4, 4):le_uint()
  local key = conv_key(pinfo)
  local qid = qids[key]
  local name, queue
  if opc == 0x7f then
    local fct = tvb(4, 1):uint()
    name = "Fabrics " .. (fctypes[fct] or string.format("0x%02x", fct))
    queue = qid and (qid == 0 and "admin" or "I/O " .. qid) or "unknown"
  elseif qid == nil then
    -- Queue not seen connecting: both readings.
    name = (io_ops[opc] or "?") .. " / " .. (admin_ops[opc] or "?")
    queue = "unknown (no Connect in the trace)"
  elseif qid == 0 then
    name, queue = admin_ops[opc] or string.format("Admin 0x%02x", opc), "admin"
  else
    name, queue = io_ops[opc] or string.format("I/O 0x%02x", opc), "I/O " .. qid
  end
  t:add(f.kind, "command")
  t:add(f.queue, queue)
  t:add(f.opcode, tvb(0, 1))
  t:add(f.cmd, name)
  t:add(f.flags, tvb(1, 1))
  t:add_le(f.cid, tvb(2, 2))
  if opc == 0x7f then
    local fct = tvb(4, 1):uint()
    t:add(f.fctype, tvb(4, 1))
    if fct == 0x01 then
      local q = tvb(42, 2):le_uint()
      t:add_le(f.qid, tvb(42, 2))
      t:add_le(f.sqsize, tvb(44, 2))
      t:add_le(f.kato, tvb(48, 4))
      qids[key] = q
      name = name .. " QID " .. q
    end
  else
    t:add_le(f.nsid, tvb(4, 4))
    if qid ~= nil and qid ~= 0 and (opc == 0x01 or opc == 0x02 or opc == 0x08) then
      t:add_le(f.slba, tvb(40, 8))
      t:add_le(f.nlb, tvb(48, 2))
    end
  end
  local sgl = tvb(24, 16)
  local st = sgl(15, 1):uint()
  local sgt = t:add(f.sgl_type, sgl(15, 1))
  t:add_le(f.sgl_addr, sgl(0, 8))
  if bit.rshift(st, 4) == 4 then
    -- Keyed SGL data block: 3-byte length, 4-byte key.
    t:add(f.sgl_len, sgl(8, 3), sgl(8, 1):uint() + sgl(9, 1):uint() * 256 + sgl(10, 1):uint() * 65536)
    t:add_le(f.sgl_key, sgl(11, 4))
  else
    t:add_le(f.sgl_len, sgl(8, 4))
  end
  if tvb:len() > 64 then
    t:add(f.incap, tvb(64), tvb:len() - 64)
  end
  t:append_text(string.format(", %s, CID 0x%04x", name, cid))
  pinfo.cols.protocol = "NVMe-oF/iWARP"
  pinfo.cols.info:append(string.format(" | NVMe-oF %s CID 0x%04x", name, cid))
end

local function cqe(tvb, pinfo, tree)
  local t = tree:add(p, tvb(), "NVMe-oF Response Capsule")
  local cid = tvb(12, 2):le_uint()
  local sf = tvb(14, 2):le_uint()
  local status = bit.band(bit.rshift(sf, 1), 0x7ff)
  local sc, sct = bit.band(status, 0xff), bit.rshift(status, 8)
  local dnr = bit.band(sf, 0x8000) ~= 0
  local text = "Success"
  if status ~= 0 then
    text = string.format("%s error, SC 0x%02x", sct_names[sct] or ("SCT " .. sct), sc)
  end
  t:add(f.kind, "response")
  t:add_le(f.dw0, tvb(0, 4))
  t:add_le(f.sqhd, tvb(8, 2))
  t:add_le(f.sqid, tvb(10, 2))
  t:add_le(f.cid, tvb(12, 2))
  t:add(f.status, tvb(14, 2), status)
  t:add(f.stname, text)
  t:add(f.dnr, tvb(14, 2), dnr)
  t:append_text(string.format(", CID 0x%04x, %s", cid, text))
  pinfo.cols.protocol = "NVMe-oF/iWARP"
  pinfo.cols.info:append(string.format(" | NVMe-oF Response CID 0x%04x %s", cid, text))
end

local function heur(tvb, pinfo, tree)
  local n = tvb:len()
  if n == 16 then
    cqe(tvb, pinfo, tree)
    return true
  end
  if n >= 64 then
    local flags = tvb(1, 1):uint()
    -- PSDT 01b (SGLs, NVMe-oF requires them) and no fused operation.
    if bit.band(flags, 0xc0) == 0x40 and bit.band(flags, 0x03) == 0 then
      sqe(tvb, pinfo, tree)
      return true
    end
  end
  return false
end

p:register_heuristic("iwarp_ddp_rdmap", heur)

-- The queue's QID from the MPA Request's private data, the NVMe/RDMA CM
-- request (NVMe-oF 1.1 §7.3.4: RECFMT, QID, HRQSIZE, HSQSIZE; after the
-- RFC 6581 IRD/ORD header in MPA revision 2): a trace of a running queue
-- has no Connect, but wire traces replay the MPA exchange first.
local f_req = Field.new("iwarp_mpa.key.req")
local f_pd = Field.new("iwarp_mpa.privatedata")
local f_rev = Field.new("iwarp_mpa.rev")
local cm = Proto("nvmeof_iwarp_cm", "NVMe/RDMA CM Request")
local cf = {
  recfmt  = ProtoField.uint16("nvmeof_iwarp_cm.recfmt", "Record Format", base.DEC),
  qid     = ProtoField.uint16("nvmeof_iwarp_cm.qid", "QID", base.DEC),
  hrqsize = ProtoField.uint16("nvmeof_iwarp_cm.hrqsize", "HRQSIZE", base.DEC),
  hsqsize = ProtoField.uint16("nvmeof_iwarp_cm.hsqsize", "HSQSIZE", base.DEC),
}
cm.fields = cf
function cm.dissector(tvb, pinfo, tree)
  if not f_req() then return end
  local pd = f_pd()
  if not pd then return end
  local r = pd.range
  local off = 0
  local rev = f_rev()
  if rev and rev.value >= 2 and r:len() >= 12 then off = 4 end
  if r:len() < off + 8 then return end
  local qid = r(off + 2, 2):le_uint()
  qids[conv_key(pinfo)] = qid
  local t = tree:add(cm, r(off, 8))
  t:add_le(cf.recfmt, r(off, 2))
  t:add_le(cf.qid, r(off + 2, 2))
  t:add_le(cf.hrqsize, r(off + 4, 2))
  t:add_le(cf.hsqsize, r(off + 6, 2))
  t:append_text(", QID " .. qid)
end
register_postdissector(cm)
