// Package archtest holds no code: its test checks the import rules of
// DEVELOPERS.md ("Architecture") on the module's package graph, as
// `go list -deps` reports it, so that a change that breaks a layer's seam
// fails the suite.
package archtest
