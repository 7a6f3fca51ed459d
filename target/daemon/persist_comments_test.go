package daemon

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/target"

	"github.com/nvmetd/nvmetd/target/configfile"
)

// commentLines returns the comment lines of a YAML document (those whose
// first non-blank character is #), and the trailing comments of lines.
func commentLines(doc string) []string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") {
			out = append(out, t)
		} else if i := strings.Index(l, " # "); i >= 0 && !strings.Contains(l[:i], `"`) {
			out = append(out, strings.TrimSpace(l[i:]))
		}
	}
	return out
}

// TestPersistKeepsComments (issue 23.13): --persist (nvmetctl save) edits
// the YAML in place: the shipped file's comments, its documentation, stay
// where they were, and a change touches only the element it changes.
// Before, every comment inside ports, subsystems and hosts was dropped (169
// lines of the shipped file) and settings at their defaults with them.
func TestPersistKeepsComments(t *testing.T) {
	isolate(t)
	shipped, err := os.ReadFile("../../configs/nvmetd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "nvmetd.yaml")
	if err := os.WriteFile(file, shipped, 0o600); err != nil {
		t.Fatal(err)
	}
	lc, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	want := commentLines(string(shipped))

	// 1. Saving the running configuration unchanged changes nothing.
	if _, err := configfile.Save(file, sha256.Sum256(shipped), false, lc.Target, ""); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	if g := commentLines(string(got)); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("an unchanged save kept %d of %d comment lines", len(g), len(want))
	}
	if string(got) != string(shipped) {
		t.Errorf("an unchanged save rewrote the file")
	}

	// 2. A namespace added: every comment stays, the namespace is there,
	// and the file still loads to the running configuration.
	c := lc.Target.Clone()
	sc := &c.Subsystems[0]
	sc.Namespaces = append(sc.Namespaces, target.NamespaceConfig{NSID: 9, Backend: target.BackendConfig{Kind: "memory", Size: "1MiB"}})
	if _, err := configfile.Save(file, sha256.Sum256(got), false, c, ""); err != nil {
		t.Fatal(err)
	}
	got2, _ := os.ReadFile(file)
	if g := commentLines(string(got2)); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("after adding a namespace: %d of %d comment lines kept", len(g), len(want))
	}
	lc2, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Clone(), lc2.Target.Clone()
	a.ApplyDefaults()
	b.ApplyDefaults()
	if d := target.Diff(a, b); !d.Empty() {
		t.Errorf("the persisted file loads to another configuration: %s\n%s", d, got2)
	}

	// 3. A setting changed back to its default: the file says so (the
	// old value must not survive as a kept line).
	c3 := lc2.Target.Clone()
	c3.Subsystems[0].Model = "nvmetd-x"
	if _, err := configfile.Save(file, sha256.Sum256(got2), false, c3, ""); err != nil {
		t.Fatal(err)
	}
	got3, _ := os.ReadFile(file)
	c3.Subsystems[0].Model = ""
	if _, err := configfile.Save(file, sha256.Sum256(got3), false, c3, ""); err != nil {
		t.Fatal(err)
	}
	lc4, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if m := lc4.Target.Subsystems[0].Model; m == "nvmetd-x" {
		t.Errorf("a model set back to the default came back as %q", m)
	}
}
