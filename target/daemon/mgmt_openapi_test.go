package daemon

import (
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/mgmtapi"
)

// routeRecorder records the patterns registered.
type routeRecorder []string

func (r *routeRecorder) HandleFunc(pattern string, _ func(http.ResponseWriter, *http.Request)) {
	*r = append(*r, pattern)
}

// openAPI is the part of docs/api.yaml the test reads.
type openAPI struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

// TestOpenAPIInSync keeps docs/api.yaml and the management API together:
// the same operations, and every schema of a configuration object has
// exactly the configuration's keys (a key added to the configuration
// schema must be added to docs/api.yaml too), every answer's schema the
// JSON names of its Go type.
func TestOpenAPIInSync(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for op := range ops {
			if slices.Contains([]string{"get", "put", "post", "patch", "delete"}, op) {
				documented = append(documented, strings.ToUpper(op)+" "+path)
			}
		}
	}
	var rec routeRecorder
	(&daemon{}).mgmtRoutes(&rec)
	served := append([]string{"GET " + statusPath}, rec...)
	slices.Sort(documented)
	slices.Sort(served)
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("docs/api.yaml lacks %s", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(served, p) {
			t.Errorf("docs/api.yaml documents %s, which nvmetd does not serve", p)
		}
	}

	schemas := []struct {
		name string
		typ  any
		tag  string
	}{
		{"Config", target.Config{}, "mapstructure"},
		{"Port", target.PortConfig{}, "mapstructure"},
		{"Referral", target.ReferralConfig{}, "mapstructure"},
		{"ANAGroup", target.ANAGroupConfig{}, "mapstructure"},
		{"Subsystem", target.SubsystemConfig{}, "mapstructure"},
		{"Namespace", target.NamespaceConfig{}, "mapstructure"},
		{"Backend", target.BackendConfig{}, "mapstructure"},
		{"Host", target.HostConfig{}, "mapstructure"},
		{"Transport", target.TransportConfig{}, "mapstructure"},
		{"Tuning", target.TuningConfig{}, "mapstructure"},
		{"Limits", target.LimitsConfig{}, "mapstructure"},
		{"IOCounters", target.IOCounters{}, "json"},
		{"Controller", target.ControllerStatus{}, "json"},
		{"Queue", target.QueueStatus{}, "json"},
		{"ChangeResult", changeResult{}, "json"},
		{"Error", apiError{}, "json"},
		{"Gateway", gwtarget.Config{}, "mapstructure"},
		{"GatewayCluster", gwtarget.ClusterConfig{}, "mapstructure"},
		{"GatewayANAGroup", gwtarget.GroupConfig{}, "mapstructure"},
		{"GatewayStatus", gwtarget.Status{}, "json"},
		{"GroupStatus", mgmtapi.GroupStatus{}, "json"},
	}
	for _, s := range schemas {
		var keys []string
		rt := reflect.TypeOf(s.typ)
		for i := 0; i < rt.NumField(); i++ {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get(s.tag), ",")
			if name != "" && name != "-" && rt.Field(i).IsExported() {
				keys = append(keys, name)
			}
		}
		var props []string
		for k := range doc.Components.Schemas[s.name].Properties {
			props = append(props, k)
		}
		slices.Sort(keys)
		slices.Sort(props)
		if !slices.Equal(keys, props) {
			t.Errorf("docs/api.yaml schema %s has properties %v; %T has keys %v", s.name, props, s.typ, keys)
		}
	}
}
