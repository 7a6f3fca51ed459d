package configfile

import (
	"fmt"
	"reflect"

	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/target"
)

// The configuration file is edited in place (issue 23.13): a port,
// subsystem, namespace or host whose settings did not change keeps its
// YAML node as the file has it (its comments, the settings it spells out
// at their defaults, its order and style); one that changed is written
// from the running configuration with the comments of the settings it
// still has; a subsystem whose namespaces alone changed keeps its node
// and gets the namespace list merged the same way. Only what changed
// loses its text.

// decodeFileConfig reads the target configuration a file's document holds
// (its ports, subsystems, hosts and the sections their defaults depend on),
// defaults applied; nil if it does not decode.
func decodeFileConfig(doc []byte) *target.Config {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil
	}
	keep := map[string]any{}
	t := reflect.TypeOf(target.Config{})
	for i := 0; i < t.NumField(); i++ {
		if k := t.Field(i).Tag.Get("mapstructure"); k != "" {
			if v, ok := m[k]; ok {
				keep[k] = v
			}
		}
	}
	var c target.Config
	if err := target.DecodeMap(keep, &c); err != nil {
		return nil
	}
	c.ApplyDefaults()
	return &c
}

// mergeList returns the sequence node for the running list run (min: the
// same without defaults, for new nodes), reusing the elements of the file's
// node oldSeq (whose decoded values are old) matched by key. nested, if
// set, merges an element that changed but matches (the subsystems'
// namespaces).
func mergeList[T any](oldSeq *yaml.Node, old, run, min []T, key func(*T) string, nested func(oldNode *yaml.Node, o, r, m *T) *yaml.Node) *yaml.Node {
	if oldSeq == nil || oldSeq.Kind != yaml.SequenceNode || len(oldSeq.Content) != len(old) {
		return listNode(reflect.ValueOf(min))
	}
	out := &yaml.Node{Kind: yaml.SequenceNode, Style: oldSeq.Style, HeadComment: oldSeq.HeadComment,
		LineComment: oldSeq.LineComment, FootComment: oldSeq.FootComment}
	for i := range run {
		k := key(&run[i])
		j := -1
		for x := range old {
			if key(&old[x]) == k {
				j = x
				break
			}
		}
		switch {
		case j < 0:
			out.Content = append(out.Content, Node(reflect.ValueOf(min[i]), true))
		case reflect.DeepEqual(old[j], run[i]):
			out.Content = append(out.Content, oldSeq.Content[j])
		case nested != nil:
			if n := nested(oldSeq.Content[j], &old[j], &run[i], &min[i]); n != nil {
				out.Content = append(out.Content, n)
				break
			}
			fallthrough
		default:
			n := Node(reflect.ValueOf(min[i]), true)
			keepComments(oldSeq.Content[j], n)
			out.Content = append(out.Content, n)
		}
	}
	if len(out.Content) == 0 {
		out.Style = yaml.FlowStyle
	}
	return out
}

// keepComments copies the comments of old onto n, and of old's mapping
// values onto n's for the keys both have.
func keepComments(old, n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = old.HeadComment, old.LineComment, old.FootComment
	if old.Kind != yaml.MappingNode || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		for j := 0; j+1 < len(old.Content); j += 2 {
			if old.Content[j].Value == n.Content[i].Value {
				k, ok := old.Content[j], n.Content[i]
				ok.HeadComment, ok.LineComment, ok.FootComment = k.HeadComment, k.LineComment, k.FootComment
				keepComments(old.Content[j+1], n.Content[i+1])
			}
		}
	}
}

// mergeSubsystem keeps the node of a subsystem whose namespaces alone
// changed, with its namespace list merged; nil if more changed.
func mergeSubsystem(oldNode *yaml.Node, o, r, m *target.SubsystemConfig) *yaml.Node {
	oc, rc := *o, *r
	oc.Namespaces, rc.Namespaces = nil, nil
	if !reflect.DeepEqual(oc, rc) || oldNode.Kind != yaml.MappingNode {
		return nil
	}
	n := *oldNode
	n.Content = append([]*yaml.Node(nil), oldNode.Content...)
	nsKey := func(c *target.NamespaceConfig) string { return fmt.Sprint(c.NSID) }
	setKey(&n, "namespaces", mergeList(getKey(oldNode, "namespaces"), o.Namespaces, r.Namespaces, m.Namespaces, nsKey, nil))
	return &n
}

// mergeConfig sets the ports, subsystems and hosts of the file's mapping m
// to the running configuration run (defaults applied; min without them),
// reusing what the file's configuration old (nil: none) has unchanged.
func mergeConfig(m *yaml.Node, old, run, min *target.Config) {
	if old == nil {
		old = &target.Config{}
	}
	portKey := func(c *target.PortConfig) string { return fmt.Sprint(c.ID) }
	subKey := func(c *target.SubsystemConfig) string { return c.NQN }
	hostKey := func(c *target.HostConfig) string { return c.NQN }
	setKey(m, "ports", mergeList(getKey(m, "ports"), old.Ports, run.Ports, min.Ports, portKey, nil))
	setKey(m, "subsystems", mergeList(getKey(m, "subsystems"), old.Subsystems, run.Subsystems, min.Subsystems, subKey, mergeSubsystem))
	setKey(m, "hosts", mergeList(getKey(m, "hosts"), old.Hosts, run.Hosts, min.Hosts, hostKey, nil))
}
