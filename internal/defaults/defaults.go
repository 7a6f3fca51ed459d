// Package defaults fills the zero fields of configuration structs with
// their defaults: the one shape (if the field is zero, set it) that every
// package's withDefaults or ApplyDefaults would otherwise spell out field
// by field.
package defaults

// Set stores def in *field if *field is the zero value of its type.
func Set[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}
