package daemon

import (
	"fmt"
	"io"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/target/configfile"
)

// writeEffective writes the effective configuration as YAML that nvmetd
// reads back unchanged: the daemon section, then the target's settings,
// keys in declaration order, durations as "30s" and sizes as written. In
// list entries (ports, subsystems, namespaces, ...) settings at their zero
// value are left out; the daemon, transport and tuning sections are
// complete. Literal secrets are redacted (the output goes to terminals
// and logs).
func writeEffective(w io.Writer, lc *loadedConfig) error {
	fc := fileConfig{Daemon: lc.Daemon, Gateway: lc.Gateway, Config: redactSecrets(*lc.Target)}
	root := configfile.Node(reflect.ValueOf(fc), false)
	src := "built-in default (no configuration file)"
	if lc.File != "" {
		src = lc.File
	}
	doc := &yaml.Node{
		Kind:        yaml.DocumentNode,
		HeadComment: fmt.Sprintf("Effective configuration of %s\nfrom %s, the environment and flags, with defaults applied.", versionLine(), src),
		Content:     []*yaml.Node{root},
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// durationType and scalar serve load.go (the YAML helpers are target/configfile's).
var durationType = reflect.TypeOf(time.Duration(0))

func scalar(tag, value string) *yaml.Node { return configfile.Scalar(tag, value) }
