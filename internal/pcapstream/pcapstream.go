// Package pcapstream reassembles the TCP byte streams of a classic pcap
// file. Tests use it to read the real Linux iWARP and NVMe/RDMA exchanges
// captured in the lab as golden vectors. It handles what those captures
// hold: Ethernet (or Linux cooked) framing, IPv4, TCP without loss.
package pcapstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
)

// Stream is one direction of a TCP connection, in the order the capture
// first saw it.
type Stream struct {
	Src, Dst netip.AddrPort
	Data     []byte
	// Gap is the number of bytes missing after Data when the capture lost
	// part of the stream (a full capture buffer drops packets): Data ends
	// at the first gap. 0 for a complete stream.
	Gap int
}

// String names the stream.
func (s *Stream) String() string { return s.Src.String() + " -> " + s.Dst.String() }

// Conn is a TCP connection: the initiator's stream (sent by the side that
// sent the SYN) and the responder's.
type Conn struct {
	Initiator, Responder *Stream
}

type segment struct {
	seq  uint32
	data []byte
}

type dir struct {
	s       *Stream
	isn     uint32
	haveISN bool
	segs    []segment
	order   int
}

// ReadFile reads a pcap file and returns its TCP connections in the order
// of their first packet.
func ReadFile(path string) ([]Conn, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse reassembles the TCP connections of a pcap file's bytes.
func Parse(b []byte) ([]Conn, error) {
	if len(b) < 24 {
		return nil, errors.New("pcap: short file header")
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("pcap: bad magic %x", b[:4])
	}
	link := bo.Uint32(b[20:24])
	dirs := map[string]*dir{}
	n := 0
	for off := 24; off+16 <= len(b); {
		incl := int(bo.Uint32(b[off+8:]))
		off += 16
		if off+incl > len(b) {
			return nil, errors.New("pcap: truncated packet")
		}
		pkt := b[off : off+incl]
		off += incl
		var ip []byte
		switch link {
		case 1: // Ethernet
			if len(pkt) < 14 || binary.BigEndian.Uint16(pkt[12:]) != 0x0800 {
				continue
			}
			ip = pkt[14:]
		case 113: // Linux cooked
			if len(pkt) < 16 || binary.BigEndian.Uint16(pkt[14:]) != 0x0800 {
				continue
			}
			ip = pkt[16:]
		case 101: // raw IP (wire traces of nvmetd)
			ip = pkt
		case 0: // BSD loopback
			if len(pkt) < 4 {
				continue
			}
			ip = pkt[4:]
		default:
			return nil, fmt.Errorf("pcap: link type %d not handled", link)
		}
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 6 {
			continue
		}
		ihl := int(ip[0]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot > len(ip) || ihl+20 > tot {
			continue
		}
		src := netip.AddrFrom4([4]byte(ip[12:16]))
		dst := netip.AddrFrom4([4]byte(ip[16:20]))
		tcp := ip[ihl:tot]
		sp, dp := binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
		seq := binary.BigEndian.Uint32(tcp[4:])
		doff := int(tcp[12]>>4) * 4
		flags := tcp[13]
		if doff > len(tcp) {
			continue
		}
		s := netip.AddrPortFrom(src, sp)
		d := netip.AddrPortFrom(dst, dp)
		key := s.String() + ">" + d.String()
		dr := dirs[key]
		if dr == nil {
			dr = &dir{s: &Stream{Src: s, Dst: d}, order: n}
			n++
			dirs[key] = dr
		}
		if flags&0x02 != 0 { // SYN
			dr.isn, dr.haveISN = seq+1, true
		}
		if payload := tcp[doff:]; len(payload) > 0 {
			dr.segs = append(dr.segs, segment{seq, append([]byte(nil), payload...)})
		}
	}
	var all []*dir
	for _, d := range dirs {
		if !d.haveISN && len(d.segs) > 0 {
			d.isn = d.segs[0].seq
		}
		sort.SliceStable(d.segs, func(i, j int) bool { return int32(d.segs[i].seq-d.segs[j].seq) < 0 })
		next := d.isn
	segs:
		for _, sg := range d.segs {
			delta := int32(sg.seq - next)
			switch {
			case delta > 0:
				d.s.Gap = int(delta)
				break segs
			case int(-delta) >= len(sg.data): // retransmission
				continue
			}
			d.s.Data = append(d.s.Data, sg.data[-delta:]...)
			next = sg.seq + uint32(len(sg.data))
		}
		all = append(all, d)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].order < all[j].order })
	var conns []Conn
	seen := map[string]bool{}
	for _, d := range all {
		k := d.s.Src.String() + ">" + d.s.Dst.String()
		if seen[k] {
			continue
		}
		rk := d.s.Dst.String() + ">" + d.s.Src.String()
		seen[k], seen[rk] = true, true
		c := Conn{Initiator: d.s}
		if r := dirs[rk]; r != nil {
			c.Responder = r.s
		} else {
			c.Responder = &Stream{Src: d.s.Dst, Dst: d.s.Src}
		}
		conns = append(conns, c)
	}
	return conns, nil
}
