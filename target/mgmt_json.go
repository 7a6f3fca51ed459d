package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// The management API speaks the configuration file's vocabulary: a port,
// subsystem, namespace or host in JSON has the keys of its YAML entry
// (the mapstructure tags: "service_id", "backend": {"size": "1GiB"}),
// durations as "30s". EncodeJSON and DecodeJSON convert, so that a key
// added to the schema is in the API at once.

// EncodeJSON converts a configuration value (a Config, a PortConfig, a
// list of them, ...) to plain values for encoding/json, keyed by the
// mapstructure tags. In list entries, zero-valued settings are left out
// (as in the effective configuration); top-level sections are complete.
func EncodeJSON(v any) any {
	return plain(reflect.ValueOf(v), false)
}

var durationType = reflect.TypeOf(time.Duration(0))

func plain(v reflect.Value, omitZero bool) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return plain(v.Elem(), omitZero)
	case reflect.Struct:
		m := map[string]any{}
		addPlainFields(m, v, omitZero)
		return m
	case reflect.Slice:
		out := make([]any, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			out = append(out, plain(v.Index(i), true))
		}
		return out
	}
	return v.Interface()
}

func addPlainFields(m map[string]any, v reflect.Value, omitZero bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if opts == "squash" {
			addPlainFields(m, v.Field(i), omitZero)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		fv := v.Field(i)
		if omitZero && (fv.IsZero() || fv.Kind() == reflect.Slice && fv.Len() == 0) {
			continue
		}
		m[name] = plain(fv, omitZero)
	}
}

// DecodeJSON decodes a JSON object into out (a pointer to a configuration
// struct) as the configuration file loader decodes YAML: keys are the
// mapstructure tags, unknown keys are refused, durations need a unit, and
// scalars convert weakly (a size may be 4096 or "4KiB"). Keys absent from
// data leave out's fields as they are, so that decoding onto an existing
// value modifies it (a PATCH). Every problem names its key.
func DecodeJSON(data []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return invalid("", "the body is not a JSON object: %v", err)
	}
	if dec.More() {
		return invalid("", "the body has more than one JSON value")
	}
	return DecodeMap(m, out)
}

// DecodeMap is DecodeJSON of an object already decoded (json.Number or
// float64 numbers).
func DecodeMap(m map[string]any, out any) error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       decodeHook(),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           out,
	})
	if err != nil {
		return err
	}
	if err := d.Decode(m); err != nil {
		return DecodeProblems(err)
	}
	return nil
}

// decodeHook converts as the daemon's loader does: strings with a unit to
// durations (a bare number is refused), comma-separated strings to lists,
// and JSON numbers to the strings of size settings.
func decodeHook() mapstructure.DecodeHookFunc {
	return mapstructure.ComposeDecodeHookFunc(
		func(f reflect.Type, t reflect.Type, data any) (any, error) {
			if t != durationType {
				if n, ok := data.(json.Number); ok && t.Kind() == reflect.String {
					return n.String(), nil
				}
				return data, nil
			}
			switch x := data.(type) {
			case string:
				d, err := time.ParseDuration(strings.TrimSpace(x))
				if err != nil {
					return nil, fmt.Errorf("%q is not a duration such as 30s, 500ms or 1h", x)
				}
				return d, nil
			case json.Number, float64, int, int64:
				return nil, fmt.Errorf("%v has no unit (write a duration such as %vs)", x, x)
			}
			return data, nil
		},
		mapstructure.StringToSliceHookFunc(","),
	)
}

// ErrUnknownKey is the Err of DecodeProblems' FieldError for a key that is
// not a setting.
var ErrUnknownKey = errors.New("unknown key")

// DecodeProblems turns mapstructure's decode errors (DecodeJSON's, the
// daemon's loader's) into a *ValidationError of one FieldError per key,
// sorted, without repeats: a key that is not a setting (Reason "unknown
// key", Err ErrUnknownKey), a value that does not decode (Reason the
// cause's text, Err the *mapstructure.DecodeError), and any other error
// (no Field, Reason its text, Err itself).
func DecodeProblems(err error) *ValidationError {
	var problems []*FieldError
	var walk func(error)
	walk = func(e error) {
		var de *mapstructure.DecodeError
		if errors.As(e, &de) && e == error(de) {
			name := de.Name()
			msg := de.Unwrap().Error()
			if keys, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
				for _, k := range strings.Split(keys, ", ") {
					path := k
					if name != "" {
						path = name + "." + k
					}
					problems = append(problems, &FieldError{Field: path, Reason: "unknown key", Err: ErrUnknownKey})
				}
				return
			}
			problems = append(problems, &FieldError{Field: name, Reason: msg, Err: de})
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
			return
		case interface{ Unwrap() error }:
			if inner := u.Unwrap(); inner != nil {
				walk(inner)
				return
			}
		}
		problems = append(problems, &FieldError{Reason: e.Error(), Err: e})
	}
	walk(err)
	slices.SortFunc(problems, func(a, b *FieldError) int { return strings.Compare(a.Error(), b.Error()) })
	return &ValidationError{Problems: slices.CompactFunc(problems, func(a, b *FieldError) bool { return a.Error() == b.Error() })}
}

// WithoutDefaults returns a copy of c in which every setting of a port,
// referral, subsystem, namespace or host that equals what ApplyDefaults
// would give it is unset, for writing a configuration file back (a
// derived serial number or the firmware revision then follow the
// program, as before). Port IDs are kept: reloads match ports by them.
// Transport, tuning and limits are returned as they are.
func (c *Config) WithoutDefaults() *Config {
	d := c.Clone()
	for i := range d.Ports {
		p := &d.Ports[i]
		id := p.ID
		stripDefaults(p, func(x *PortConfig) *Config { return &Config{Ports: []PortConfig{*x}} },
			func(cfg *Config) *PortConfig { return &cfg.Ports[0] })
		p.ID = id
		for j := range p.Referrals {
			stripDefaults(&p.Referrals[j], func(x *ReferralConfig) *Config {
				return &Config{Ports: []PortConfig{{ID: 1, Referrals: []ReferralConfig{*x}}}}
			}, func(cfg *Config) *ReferralConfig { return &cfg.Ports[0].Referrals[0] })
		}
	}
	for i := range d.Subsystems {
		s := &d.Subsystems[i]
		ns := s.Namespaces
		s.Namespaces = nil
		stripDefaults(s, func(x *SubsystemConfig) *Config { return &Config{Subsystems: []SubsystemConfig{*x}} },
			func(cfg *Config) *SubsystemConfig { return &cfg.Subsystems[0] })
		for j := range ns {
			stripDefaults(&ns[j], func(x *NamespaceConfig) *Config {
				return &Config{Subsystems: []SubsystemConfig{{NQN: s.NQN, Namespaces: []NamespaceConfig{*x}}}}
			}, func(cfg *Config) *NamespaceConfig { return &cfg.Subsystems[0].Namespaces[0] })
		}
		s.Namespaces = ns
	}
	for i := range d.Hosts {
		stripDefaults(&d.Hosts[i], func(x *HostConfig) *Config { return &Config{Hosts: []HostConfig{*x}} },
			func(cfg *Config) *HostConfig { return &cfg.Hosts[0] })
	}
	return d
}

// stripDefaults unsets each scalar field of *x (nested structs field by
// field; lists are kept) whose value is what ApplyDefaults gives it when
// unset: wrap puts a copy of x alone in a configuration, at finds it again.
func stripDefaults[T any](x *T, wrap func(*T) *Config, at func(*Config) *T) {
	var walk func(v reflect.Value, path []int)
	walk = func(v reflect.Value, path []int) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			p := append(slices.Clone(path), i)
			if f.Kind() == reflect.Struct && f.Type() != durationType {
				walk(f, p)
				continue
			}
			if f.Kind() == reflect.Slice || f.IsZero() || !f.CanSet() {
				continue
			}
			trial := *x
			reflect.ValueOf(&trial).Elem().FieldByIndex(p).SetZero()
			cfg := wrap(&trial)
			cfg.ApplyDefaults()
			got := reflect.ValueOf(at(cfg)).Elem().FieldByIndex(p)
			if reflect.DeepEqual(got.Interface(), f.Interface()) {
				f.SetZero()
			}
		}
	}
	walk(reflect.ValueOf(x).Elem(), nil)
}
