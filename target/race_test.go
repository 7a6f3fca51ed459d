//go:build race

package target

// raceEnabled: under the race detector sync.Pool drops items at random, so
// the allocation counts of paths that use one (the file backend's bounce
// buffers) mean nothing.
const raceEnabled = true
