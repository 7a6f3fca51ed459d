package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNvmetdDocs (issue 23.11): the man page and the completions describe
// nvmetd's trace command with its flags (they had only status).
func TestNvmetdDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds nvmetd")
	}
	bin := filepath.Join(t.TempDir(), "nvmetd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/nvmetd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := nvmetd(bin)
	man := manPage(p, "test")
	for _, w := range []string{"trace", `\-\-host`, `\-\-max\-size`, `\-\-controller`} { // troff escapes hyphens
		if !strings.Contains(man, w) {
			t.Errorf("nvmetd.8 lacks %q", w)
		}
	}
	if bash := bashCompletion(p); !strings.Contains(bash, "trace") || !strings.Contains(bash, "--max-size") {
		t.Errorf("bash completion lacks trace:\n%s", bash)
	}
	if zsh := zshCompletion(p); !strings.Contains(zsh, "trace") {
		t.Errorf("zsh completion lacks trace")
	}
}
