package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EMkfsRefusesExisting (issue 23.1): the connect command nvmetd
// prints (--mount DIR --mkfs), run a second time, reformatted the
// namespace and exited 0. Now it is refused, says what it found and how to
// override, and the file written after the first run is still there;
// --force makes the filesystem anyway.
func TestE2EMkfsRefusesExisting(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	connect := []string{"connect", "-a", "127.0.0.1", "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs"}
	e.must(connect...)
	if err := writeFileSync(filepath.Join(mnt, "precious"), []byte("keep me")); err != nil {
		t.Fatal(err)
	}
	e.must("disconnect", "-n", tg.NQN)

	out, err := e.run(connect...)
	if err == nil {
		t.Fatalf("the same connect --mkfs again succeeded (the namespace was reformatted):\n%s", out)
	}
	for _, want := range []string{"refusing --mkfs", "ext2/ext3/ext4", "TYPE=ext4", "--force", "without --mkfs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	if l := e.list(); len(l) != 0 {
		t.Fatalf("a refused connect left a controller: %+v", l)
	}
	e.must(connect[:len(connect)-1]...) // without --mkfs
	if b, err := os.ReadFile(filepath.Join(mnt, "precious")); err != nil || string(b) != "keep me" {
		t.Fatalf("the file is gone after the refused --mkfs: %q %v", b, err)
	}
	e.must("disconnect", "-n", tg.NQN)

	e.must(append(connect, "--force")...)
	if _, err := os.Stat(filepath.Join(mnt, "precious")); !os.IsNotExist(err) {
		t.Errorf("--mkfs --force kept the old filesystem: %v", err)
	}
	e.must("disconnect", "-n", tg.NQN)
}
