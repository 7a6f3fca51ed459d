package main

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// jobj is an ordered JSON object printed the way nvme-cli prints its JSON
// (json-c with JSON_C_TO_STRING_PRETTY: two-space indent, no space after
// the colon), so that field order and layout match nvme -o json.
type jobj struct {
	keys []string
	vals []any // uint64, string, []string, *jobj, []*jobj
}

func (o *jobj) add(k string, v any) *jobj {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
	return o
}

// String renders o followed by nothing (callers add the newline).
func (o *jobj) String() string {
	var b strings.Builder
	o.write(&b, 0)
	return b.String()
}

func (o *jobj) write(b *strings.Builder, depth int) {
	ind := strings.Repeat("  ", depth+1)
	b.WriteString("{")
	for i, k := range o.keys {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n" + ind + strconv.Quote(k) + ":")
		writeJSONValue(b, o.vals[i], depth+1)
	}
	b.WriteString("\n" + strings.Repeat("  ", depth) + "}")
}

func writeJSONValue(b *strings.Builder, v any, depth int) {
	switch x := v.(type) {
	case *jobj:
		x.write(b, depth)
	case []*jobj:
		ind := strings.Repeat("  ", depth+1)
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n" + ind)
			e.write(b, depth+1)
		}
		b.WriteString("\n" + strings.Repeat("  ", depth) + "]")
	case []string:
		ind := strings.Repeat("  ", depth+1)
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n" + ind + strconv.Quote(e))
		}
		b.WriteString("\n" + strings.Repeat("  ", depth) + "]")
	case string:
		b.WriteString(strconv.Quote(x))
	case uint64, uint32, uint16, uint8, int, int64, int32:
		fmt.Fprintf(b, "%d", x)
	default:
		fmt.Fprintf(b, "%q", fmt.Sprint(x))
	}
}

// featureJSON adds one Get Features result to root as nvme-cli 2.x's
// json_feature_show does: "feature: 0xNN" with the name and the value
// under the select's name, then for select 3 (supported capabilities) the
// capabilities ("Feature: 0xNN: select"), else the decoded fields
// ("Feature: 0xNN"; the features a fabrics controller reports are decoded,
// others give an empty object, as nvme-cli does for features it does not
// know).
func featureJSON(root *jobj, fid, sel uint8, result uint32, data []byte) {
	name, ok := featureNames[fid]
	if !ok {
		name = "Unknown"
	}
	width := 8
	if result != 0 {
		width = 10
	}
	id := cHexWidth(uint64(fid), 4)
	root.add("feature: "+id, []*jobj{(&jobj{}).add("name", name).add(selectNames[sel&3], cHexWidth(uint64(result), width))})
	if sel == 3 {
		caps := []string{}
		for _, c := range []struct {
			bit  uint32
			text string
		}{{1, "saveable"}, {2, "per-namespace"}, {4, "changeable"}} {
			if result&c.bit != 0 {
				caps = append(caps, c.text)
			}
		}
		root.add("Feature: "+id+": select", caps)
		return
	}
	f := &jobj{}
	switch fid {
	case 0x06:
		wce := "Disabled"
		if result&1 != 0 {
			wce = "Enabled"
		}
		f.add("Volatile Write Cache Enable (WCE)", wce)
	case 0x07:
		f.add("Number of IO Completion Queues Allocated (NCQA)", uint64(result>>16)+1)
		f.add("Number of IO Submission Queues Allocated (NSQA)", uint64(result&0xffff)+1)
	case 0x0f:
		f.add("Keep Alive Timeout (KATO) in milliseconds", uint64(result))
	case 0x81:
		if len(data) >= 16 && result&1 != 0 { // EXHID: 128 bits, little endian
			lo, hi := binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:])
			f.add("Host Identifier (HOSTID)", new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64), new(big.Int).SetUint64(lo)).String())
		} else if len(data) >= 8 {
			f.add("Host Identifier (HOSTID)", binary.LittleEndian.Uint64(data))
		}
	}
	root.add("Feature: "+id, []*jobj{f})
}
