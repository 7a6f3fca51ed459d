package backend

// Test hooks: the external tests use these to reach slow paths that the
// machine's kernel and file systems would not otherwise take.

// DisableZeroOffload makes WriteZeroes and Discard behave as on a file
// system or device that refuses every offloaded way of zeroing.
func DisableZeroOffload(b Backend) {
	switch b := b.(type) {
	case *File:
		b.noPunch.Store(true)
		b.noZeroRange.Store(true)
	case *Block:
		b.noPunch.Store(true)
		b.noZeroOut.Store(true)
	}
}

// DisableZeroRange makes a File behave as on tmpfs: hole punching but no
// FALLOC_FL_ZERO_RANGE.
func DisableZeroRange(f *File) { f.noZeroRange.Store(true) }

// DisableRWFDSYNC makes FUA writes take the O_DSYNC descriptor fallback, as
// on kernels without pwritev2.
func DisableRWFDSYNC(b Backend) {
	switch b := b.(type) {
	case *File:
		b.io.noRWF.Store(true)
	case *Block:
		b.io.noRWF.Store(true)
	}
}
