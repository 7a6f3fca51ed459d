package main

import (
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// stateDirFlag overrides the runtime directory (--state-dir).
var stateDirFlag string

// store is the state store (initiator/hoststate) of the runtime
// directory: --state-dir, else hoststate.DefaultDir.
func store() hoststate.Store {
	if stateDirFlag != "" {
		return hoststate.Store{Dir: stateDirFlag}
	}
	return hoststate.Store{Dir: hoststate.DefaultDir()}
}
