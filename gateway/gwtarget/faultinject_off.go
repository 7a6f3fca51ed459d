//go:build !faultinject

package gwtarget

// faultInjectBuild says that this build injects faults.
const faultInjectBuild = false

// stepDownFault is the test-only fault injector's hook (faultinject.go,
// build tag faultinject); a production build injects nothing.
func stepDownFault(uint32) error { return nil }

// faultInjectorNote is "" in a production build.
func faultInjectorNote() string { return "" }
