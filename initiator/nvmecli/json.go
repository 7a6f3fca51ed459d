package nvmecli

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Object is an ordered JSON object printed the way nvme-cli prints its JSON
// (json-c with JSON_C_TO_STRING_PRETTY: two-space indent, no space after
// the colon), so that field order and layout match nvme -o json.
type Object struct {
	keys []string
	vals []any // uint64, string, []string, *Object, []*Object
}

// Add appends the member k: v (uint64 and the other integers, string,
// []string, *Object or []*Object).
func (o *Object) Add(k string, v any) *Object {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
	return o
}

// NewObject returns an empty object.
func NewObject() *Object { return &Object{} }

// Array renders objs as nvme-cli prints a top-level JSON array (the
// effects log, list-subsys): "[", each object indented by two spaces on
// a line of its own, "]".
func Array(objs ...*Object) string {
	var sb strings.Builder
	sb.WriteString("[")
	for i, o := range objs {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("\n  ")
		o.write(&sb, 1)
	}
	sb.WriteString("\n]")
	return sb.String()
}

// Len is the number of members of o.
func (o *Object) Len() int { return len(o.keys) }

// String renders o followed by nothing (callers add the newline).
func (o *Object) String() string {
	var b strings.Builder
	o.write(&b, 0)
	return b.String()
}

func (o *Object) write(b *strings.Builder, depth int) {
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
	case *Object:
		x.write(b, depth)
	case []*Object:
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

// FeatureJSON adds one Get Features result to root as nvme-cli 2.x's
// json_feature_show does: "feature: 0xNN" with the name and the value
// under the select's name, then for select 3 (supported capabilities) the
// capabilities ("Feature: 0xNN: select"), else the decoded fields
// ("Feature: 0xNN"; the features a fabrics controller reports are decoded,
// others give an empty object, as nvme-cli does for features it does not
// know).
func FeatureJSON(root *Object, fid, sel uint8, result uint32, data []byte) {
	name, ok := featureNames[fid]
	if !ok {
		name = "Unknown"
	}
	width := 8
	if result != 0 {
		width = 10
	}
	id := cHexWidth(uint64(fid), 4)
	root.Add("feature: "+id, []*Object{(&Object{}).Add("name", name).Add(selectNames[sel&3], cHexWidth(uint64(result), width))})
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
		root.Add("Feature: "+id+": select", caps)
		return
	}
	f := &Object{}
	switch fid {
	case 0x06:
		wce := "Disabled"
		if result&1 != 0 {
			wce = "Enabled"
		}
		f.Add("Volatile Write Cache Enable (WCE)", wce)
	case 0x07:
		f.Add("Number of IO Completion Queues Allocated (NCQA)", uint64(result>>16)+1)
		f.Add("Number of IO Submission Queues Allocated (NSQA)", uint64(result&0xffff)+1)
	case 0x0f:
		f.Add("Keep Alive Timeout (KATO) in milliseconds", uint64(result))
	case 0x81:
		if len(data) >= 16 && result&1 != 0 { // EXHID: 128 bits, little endian
			lo, hi := binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:])
			f.Add("Host Identifier (HOSTID)", new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64), new(big.Int).SetUint64(lo)).String())
		} else if len(data) >= 8 {
			f.Add("Host Identifier (HOSTID)", binary.LittleEndian.Uint64(data))
		}
	}
	root.Add("Feature: "+id, []*Object{f})
}
