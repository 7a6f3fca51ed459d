//go:build rbd

package backend

// RBDMaxAIO is the cap on asynchronous operations in flight per image.
const RBDMaxAIO = rbdMaxAIO
