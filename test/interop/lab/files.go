package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Put copies the host file localPath into the guest as /host/bin/<base name>
// (executable, and on the guest's PATH) and returns that guest path. The
// guest's /host is a 9p share of the VM's runtime directory, so this is a
// host-side copy.
func (vm *VM) Put(localPath string) (string, error) {
	return vm.PutAs(localPath, filepath.Base(localPath))
}

// PutAs is Put with another name in /host/bin.
func (vm *VM) PutAs(localPath, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/") {
		return "", fmt.Errorf("lab: bad guest file name %q", name)
	}
	dst := filepath.Join(vm.runDir, "share", "bin", name)
	tmp := filepath.Join(filepath.Dir(dst), "."+name+".tmp")
	if err := copyFile(localPath, tmp, 0o755); err != nil {
		return "", fmt.Errorf("lab: put %s into %s: %w", localPath, vm, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("lab: put %s into %s: %w", localPath, vm, err)
	}
	return "/host/bin/" + name, nil
}

// Get copies the guest file guestPath to the host file localPath.
func (vm *VM) Get(guestPath, localPath string) error {
	name := fmt.Sprintf("get-%d-%d-%s", os.Getpid(), jobSeq.Add(1), path.Base(guestPath))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := vm.Exec(ctx, fmt.Sprintf("cp %s /host/out/%s", Quote(guestPath), name)); err != nil {
		return err
	}
	src := filepath.Join(vm.runDir, "share", "out", name)
	defer os.Remove(src)
	if err := os.Rename(src, localPath); err == nil {
		return nil
	}
	if err := copyFile(src, localPath, 0o644); err != nil {
		return fmt.Errorf("lab: get %s from %s: %w", guestPath, vm, err)
	}
	return nil
}

// BuildAndPut builds the Go main package pkg as a static linux/amd64 binary
// (CGO_ENABLED=0), copies it into the guest with Put and returns its guest
// path (/host/bin/<name>, on the guest's PATH). pkg is an import path, or a
// path relative to the module root such as "./cmd/iwping". Builds are done
// once per VM; a build failure fails t.
func (vm *VM) BuildAndPut(t testing.TB, pkg string) string {
	t.Helper()
	vm.buildMu.Lock()
	defer vm.buildMu.Unlock()
	if p, ok := vm.built[pkg]; ok {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("lab: BuildAndPut(%s): %v", pkg, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if gr := os.Getenv("GOROOT"); gr != "" {
			goBin = filepath.Join(gr, "bin", "go")
		} else {
			t.Fatalf("lab: BuildAndPut(%s): no go command on PATH", pkg)
		}
	}
	name := path.Base(strings.TrimSuffix(pkg, "/"))
	dir := filepath.Join(vm.runDir, "build")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(goBin, "build", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lab: go build %s (in %s): %v\n%s", pkg, root, err, b)
	}
	gp, err := vm.Put(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab: built %s (%.1fs) and put it into %s as %s", pkg, time.Since(start).Seconds(), vm, gp)
	if vm.built == nil {
		vm.built = map[string]string{}
	}
	vm.built[pkg] = gp
	return gp
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// Quote quotes s as one word for the guest's sh.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
