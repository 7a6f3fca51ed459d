package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is the program version, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty means: from the build info.
var version = ""

// programVersion returns the version: the -X value, else the module version
// of the main module, else the VCS revision, else "dev".
func programVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// versionLine is what --version prints.
func versionLine() string {
	return fmt.Sprintf("nvmetd %s (%s, %s/%s)", programVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// firmwareRevision turns a version into an Identify Controller firmware
// revision: at most 8 printable ASCII characters, without a leading "v" or
// any pre-release or build suffix ("v1.2.3-rc.1+abc" → "1.2.3").
func firmwareRevision(v string) string {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+ "); i > 0 {
		v = v[:i]
	}
	var b strings.Builder
	for i := 0; i < len(v) && b.Len() < 8; i++ {
		if v[i] > 0x20 && v[i] < 0x7F {
			b.WriteByte(v[i])
		}
	}
	if b.Len() == 0 {
		return "dev"
	}
	return b.String()
}
