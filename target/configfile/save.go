package configfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/target"
)

// ErrChanged is returned by Save when the configuration file
// is not what the daemon last read or wrote: someone edited it since, and
// writing would lose that edit.
var ErrChanged = errors.New("the configuration file changed on disk since nvmetd read it (reload it with SIGHUP first, or save with force)")

// Save writes the running configuration back into the
// configuration file, atomically (a temporary file in the same directory,
// fsync, rename, fsync of the directory; nvmetcli save does the same): the
// ports, subsystems and hosts are replaced by cfg's (settings at their
// defaults left out, see target.Config.WithoutDefaults), and
// daemon.log_level by logLevel if it is not empty (set through the API). Everything else of the
// file (the daemon, transport, tuning and limits sections, comments outside
// the replaced lists) stays as it was. Unless force, the file must still
// have the content whose SHA-256 is want. It returns the new content's
// SHA-256.
func Save(file string, want [32]byte, force bool, cfg *target.Config, logLevel string) ([32]byte, error) {
	var sum [32]byte
	doc, err := Read(file)
	if err != nil {
		return sum, fmt.Errorf("config file %s: %w", file, err)
	}
	if !force && sha256.Sum256(doc) != want {
		return sum, fmt.Errorf("config file %s: %w", file, ErrChanged)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return sum, fmt.Errorf("config file %s: %w", file, err)
	}
	if root.Kind == 0 {
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return sum, fmt.Errorf("config file %s: the document is not a mapping", file)
	}
	m := root.Content[0]
	run := cfg.Clone()
	run.ApplyDefaults()
	out := run.WithoutDefaults()
	old := decodeFileConfig(doc)
	if logLevel == "" && old != nil && target.Diff(old, run).Empty() && reflect.DeepEqual(old.Ports, run.Ports) &&
		reflect.DeepEqual(old.Subsystems, run.Subsystems) && reflect.DeepEqual(old.Hosts, run.Hosts) {
		// Nothing to save: the file is left as it is, byte for byte,
		// but for its mode when it holds a literal secret.
		if HasLiteralSecrets(out) {
			if err := privateMode(file); err != nil {
				return sum, fmt.Errorf("config file %s: %w", file, err)
			}
		}
		return sha256.Sum256(doc), nil
	}
	mergeConfig(m, old, run, out)
	if logLevel != "" {
		dm := getKey(m, "daemon")
		if dm == nil || dm.Kind != yaml.MappingNode {
			dm = &yaml.Node{Kind: yaml.MappingNode}
			setKey(m, "daemon", dm)
		}
		setKey(dm, "log_level", Scalar("!!str", logLevel))
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return sum, err
	}
	if err := enc.Close(); err != nil {
		return sum, err
	}
	// A file that holds a literal secret is written 0600 whatever its
	// mode was (an admin's 0644 conffile would hand the key to every
	// local user).
	if err := writeFileAtomic(file, b.Bytes(), HasLiteralSecrets(out)); err != nil {
		return sum, fmt.Errorf("config file %s: %w", file, err)
	}
	return sha256.Sum256(b.Bytes()), nil
}

// listNode is a configuration list as YAML: block style, [] when empty.
func listNode(v reflect.Value) *yaml.Node {
	n := Node(v, true)
	if len(n.Content) == 0 {
		n.Style = yaml.FlowStyle
	}
	return n
}

// getKey returns the value of key in mapping m, or nil.
func getKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setKey sets key in mapping m to v, keeping the key's place (and its
// comments) if it is there, else appending it.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v.LineComment = m.Content[i+1].LineComment
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, Scalar("!!str", key), v)
}

// writeFileAtomic replaces path with data: a temporary file beside it with
// path's mode and owner, fsync, rename over path, fsync of the directory.
// A reader sees the old or the new file, never a part; a crash leaves one
// of them. private makes the new file mode 0600 whatever path's mode was.
func writeFileAtomic(path string, data []byte, private bool) error {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real // replace the file a symbolic link points to, not the link
	}
	mode := os.FileMode(0o600)
	uid, gid := -1, -1
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if private {
		mode = 0o600
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil && !errors.Is(err, os.ErrPermission) {
			return err
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// privateMode makes the file path (or the one its link points to) mode
// 0600 if others could read it.
func privateMode(path string) error {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(path, 0o600)
	}
	return nil
}
