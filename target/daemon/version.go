package daemon

import "github.com/nvmetd/nvmetd/internal/version"

// programVersion returns the version (internal/version).
func programVersion() string { return version.Version() }

// versionLine is what --version prints.
func versionLine() string { return version.Line("nvmetd") }

// firmwareRevision turns a version into an Identify Controller firmware
// revision (version.FirmwareRevision).
func firmwareRevision(v string) string { return version.FirmwareRevision(v) }
