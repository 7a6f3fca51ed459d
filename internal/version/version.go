// Package version is the version of nvmetd's programs (nvmetd, nvmeof,
// iwping), taken from the build: a release build sets it with
//
//	go build -ldflags "-X github.com/nvmetd/nvmetd/internal/version.version=v0.1.0"
//
// (make build and make deb do, from `git describe`); otherwise it is the
// module version, else the VCS revision Go stamped into the binary
// (runtime/debug.ReadBuildInfo), else "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags -X; empty means: from the
// build info.
var version = ""

// Version returns the program version: the -X value, else the main
// module's version, else the VCS revision (12 hex digits, "-dirty" for a
// modified tree), else "dev".
func Version() string {
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

// Line is what --version prints: "nvmetd v0.1.0 (go1.26.8, linux/amd64)".
func Line(program string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", program, Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// FirmwareRevision turns a version into an Identify Controller firmware
// revision: at most 8 printable ASCII characters, without a leading "v" or
// any pre-release or build suffix ("v1.2.3-rc.1+abc" → "1.2.3"); a
// revision ("0123456789ab-dirty") keeps its first 8 digits.
func FirmwareRevision(v string) string {
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
