//go:build !rbd

package backend

// openRBD is the kind rbd case of [Open] in a build without the rbd tag: it
// checks the options, then fails with ErrRBDNotBuilt.
func openRBD(opts RBDOptions) (Backend, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return nil, ErrRBDNotBuilt
}
