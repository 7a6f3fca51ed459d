//go:build !race

package tcp

// raceAcquire and raceRelease: see race_on.go (nothing without the race
// detector).
func raceAcquire(uintptr) {}
func raceRelease()        {}
