package configfile

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var durationType = reflect.TypeOf(time.Duration(0))

// Node converts a configuration value to a YAML node using the
// mapstructure tags. omitZero leaves out zero-valued struct fields.
func Node(v reflect.Value, omitZero bool) *yaml.Node {
	if v.Type() == durationType {
		return Scalar("!!str", formatDuration(time.Duration(v.Int())))
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return Scalar("!!null", "null")
		}
		return Node(v.Elem(), omitZero)
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		addFields(m, v, omitZero)
		return m
	case reflect.Slice:
		s := &yaml.Node{Kind: yaml.SequenceNode}
		if v.Type().Elem().Kind() == reflect.String {
			s.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			s.Content = append(s.Content, Node(v.Index(i), true))
		}
		return s
	case reflect.String:
		n := Scalar("!!str", v.String())
		if yaml11Bool[strings.ToLower(v.String())] {
			// YAML 1.1 readers would take these for booleans.
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	case reflect.Bool:
		return Scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return Scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Scalar("!!int", strconv.FormatUint(v.Uint(), 10))
	}
	return Scalar("!!str", fmt.Sprint(v.Interface()))
}

// addFields appends the fields of struct v to mapping m; squashed
// (embedded) structs are inlined.
func addFields(m *yaml.Node, v reflect.Value, omitZero bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if opts == "squash" {
			addFields(m, v.Field(i), omitZero)
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Pointer && fv.IsNil() {
			continue // an optional section that is not there (gateway)
		}
		if omitZero && (fv.IsZero() || fv.Kind() == reflect.Slice && fv.Len() == 0) {
			continue
		}
		if (fv.Kind() == reflect.Slice) && fv.Len() == 0 && !omitZero {
			// An empty list at the top level reads better as [] than as null.
			m.Content = append(m.Content, Scalar("!!str", name), &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle})
			continue
		}
		m.Content = append(m.Content, Scalar("!!str", name), Node(fv, omitZero))
	}
}

// Scalar is a YAML scalar node of tag (!!str, !!int, ...).
func Scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// yaml11Bool are the plain scalars YAML 1.1 reads as booleans.
var yaml11Bool = map[string]bool{"y": true, "n": true, "yes": true, "no": true, "on": true, "off": true, "true": true, "false": true}

// formatDuration formats d like time.Duration.String without zero
// trailing units: 1h, 2m, 1h30m, 30s, 500ms.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
