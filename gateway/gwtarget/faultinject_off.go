//go:build !faultinject

package gwtarget

// stepDownFault is the test-only fault injector's hook (faultinject.go,
// build tag faultinject); a production build injects nothing.
func stepDownFault(uint32) error { return nil }

// faultInjectorNote is "" in a production build.
func faultInjectorNote() string { return "" }
