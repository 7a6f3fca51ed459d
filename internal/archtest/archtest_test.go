package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nvmetd/nvmetd/"

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Standard     bool
}

// list runs `go list -deps -test=false -json` on patterns, from the module
// root, and returns the packages by import path.
func list(t *testing.T, patterns ...string) map[string]*pkg {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skipf("needs the go command to list the package graph: %v", err)
		}
	}
	cmd := exec.Command(gobin, append([]string{"list", "-deps", "-json"}, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func isEngine(path string) bool {
	return path == module+"iwarp" || strings.HasPrefix(path, module+"iwarp/")
}

// TestOnlyTheBindingImportsTheEngine: the target, the initiator and the
// host CLI speak NVMe/RDMA; in their whole dependency graph only the
// binding (nvmeof/rdma) and the engine itself import the iWARP engine
// (iwarp, iwarp/wire).
func TestOnlyTheBindingImportsTheEngine(t *testing.T) {
	roots := []string{"./target", "./initiator", "./cmd/nvmeof", "./cmd/nvmetd"}
	pkgs := list(t, roots...)
	for _, p := range pkgs {
		if isEngine(p.ImportPath) || p.ImportPath == module+"nvmeof/rdma" {
			continue
		}
		for _, imp := range p.Imports {
			if isEngine(imp) {
				t.Errorf("%s imports %s: only nvmeof/rdma may (it owns the transport's configuration and errors)", p.ImportPath, imp)
			}
		}
	}
	if _, ok := pkgs[module+"nvmeof/rdma"]; !ok {
		t.Fatalf("nvmeof/rdma is not in the graph of %v: the check saw nothing", roots)
	}
}

// TestWirePackagesArePure: nvmeof (the NVMe and NVMe-oF structures) and
// nvmeof/auth and the wire codecs (nvmeof/tcp/wire, iwarp/wire) do no file, network or system I/O of their own.
func TestWirePackagesArePure(t *testing.T) {
	pkgs := list(t, "./nvmeof", "./nvmeof/auth", "./nvmeof/tcp/wire", "./iwarp/wire")
	forbidden := func(imp string) bool {
		return imp == "os" || strings.HasPrefix(imp, "os/") || imp == "net" || strings.HasPrefix(imp, "net/") ||
			imp == "syscall" || strings.HasPrefix(imp, "golang.org/x/sys/")
	}
	for _, path := range []string{"nvmeof", "nvmeof/auth", "nvmeof/tcp/wire", "iwarp/wire"} {
		p := pkgs[module+path]
		if p == nil {
			t.Fatalf("%s not listed", path)
		}
		for _, imp := range p.Imports {
			if forbidden(imp) {
				t.Errorf("%s imports %s: it must stay pure (no file or network I/O)", path, imp)
			}
		}
	}
}

// TestImportDirection: cmd → target/initiator → nvmeof (+nvmeof/rdma) →
// iwarp, and target → backend. The target and the initiator never import
// each other; the engine knows nothing of NVMe; backends know no
// transport. Tests may cross one seam only: the initiator's tests run
// against the real target, so the target's tests must not import the
// initiator.
func TestImportDirection(t *testing.T) {
	pkgs := list(t, "./...")
	under := func(path, dir string) bool {
		return path == module+dir || strings.HasPrefix(path, module+dir+"/")
	}
	rules := []struct {
		from, to string
		why      string
	}{
		{"target", "initiator", "the controller and the host never import each other"},
		{"initiator", "target", "the controller and the host never import each other"},
		{"iwarp", "nvmeof", "the engine knows nothing of NVMe"},
		{"iwarp", "target", "the engine is the bottom layer"},
		{"iwarp", "initiator", "the engine is the bottom layer"},
		{"nvmeof", "target", "the NVMe layer is below the controller"},
		{"nvmeof", "initiator", "the NVMe layer is below the host"},
		{"nvmeof", "backend", "the NVMe layer knows no storage"},
		{"backend", "nvmeof", "backends know no transport"},
		{"backend", "iwarp", "backends know no transport"},
		{"backend", "target", "backends are below the controller"},
		{"nvmeof/tcp", "iwarp", "NVMe/TCP runs on the kernel's TCP, not the iWARP engine"},
		{"nvmeof/tcp", "nvmeof/rdma", "the two transport bindings are siblings"},
		{"nvmeof/rdma", "nvmeof/tcp", "the two transport bindings are siblings"},
	}
	for _, p := range pkgs {
		if p.Standard || !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		for _, r := range rules {
			if !under(p.ImportPath, r.from) {
				continue
			}
			for _, imp := range p.Imports {
				if under(imp, r.to) {
					t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.why)
				}
			}
		}
	}
	// Only the target (its collector), the commands and the daemon behind
	// cmd/nvmetd (target/daemon), and their serving helper speak
	// Prometheus: the layers below export plain stats structs.
	for _, p := range pkgs {
		if p.Standard || !strings.HasPrefix(p.ImportPath, module) || p.ImportPath == module+"target" ||
			under(p.ImportPath, "cmd") || p.ImportPath == module+"target/daemon" || p.ImportPath == module+"internal/metricserve" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/prometheus/") {
				t.Errorf("%s imports %s: only target, target/daemon and cmd may import Prometheus (export a stats struct instead)", p.ImportPath, imp)
			}
		}
	}
	tp := pkgs[module+"target"]
	if tp == nil {
		t.Fatal("target not listed")
	}
	if i := slices.IndexFunc(append(tp.TestImports, tp.XTestImports...), func(s string) bool { return under(s, "initiator") }); i >= 0 {
		t.Errorf("target's tests import the initiator: the initiator's tests import the target, keep one direction")
	}
}

// testSupport says whether a package of the module is test support: the
// tree internal/testing/..., the suites and their helpers under test/...,
// and backend/backendtest, the backend conformance kit that is public on
// purpose (implementations outside this module run it, as testing/fstest).
func testSupport(path string) bool {
	for _, dir := range []string{"internal/testing", "test", "backend/backendtest"} {
		if path == module+dir || strings.HasPrefix(path, module+dir+"/") {
			return true
		}
	}
	return false
}

// TestTestSupportApart: what only tests use lives in its own tree, apart
// from what the product runs. No package of the product imports test
// support (in its non-test files), and no package of the product is test
// support in disguise: a non-test file that imports "testing" is a test
// helper, and belongs under internal/testing/ (or test/).
func TestTestSupportApart(t *testing.T) {
	pkgs := list(t, "./...")
	var product int
	for _, p := range pkgs {
		if p.Standard || !strings.HasPrefix(p.ImportPath, module) || testSupport(p.ImportPath) {
			continue
		}
		product++
		for _, imp := range p.Imports {
			if testSupport(imp) {
				t.Errorf("%s imports %s: test support is for tests only", p.ImportPath, imp)
			}
			if imp == "testing" {
				t.Errorf("%s imports testing outside its tests: a test helper in a package of the product (move it under internal/testing/)", p.ImportPath)
			}
		}
	}
	if product == 0 || pkgs[module+"internal/testing/rawtcp"] == nil {
		t.Fatal("the package graph lists no product package or no test support: the check saw nothing")
	}
}
