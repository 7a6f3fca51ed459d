//go:build race

package backend_test

// raceEnabled: the race detector allocates, so allocation counts are
// meaningless under it.
const raceEnabled = true
