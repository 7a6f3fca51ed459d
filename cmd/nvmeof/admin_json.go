package main

import (
	"fmt"
	"strconv"
	"strings"
)

// jobj is an ordered JSON object printed the way nvme-cli prints its JSON
// (json-c with JSON_C_TO_STRING_PRETTY: two-space indent, no space after
// the colon), so that field order and layout match nvme -o json.
type jobj struct {
	keys []string
	vals []any // uint64, string, *jobj, []*jobj
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
	case string:
		b.WriteString(strconv.Quote(x))
	case uint64, uint32, uint16, uint8, int, int64, int32:
		fmt.Fprintf(b, "%d", x)
	default:
		fmt.Fprintf(b, "%q", fmt.Sprint(x))
	}
}
