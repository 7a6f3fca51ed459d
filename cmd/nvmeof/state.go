package main

import (
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// The connection daemon's state store is initiator/hoststate; the names
// below are the command's (its flag, and the store of that directory).

// stateDirFlag overrides the runtime directory (--state-dir).
var stateDirFlag string

// stateDir returns the runtime directory.
func stateDir() string {
	if stateDirFlag != "" {
		return stateDirFlag
	}
	return hoststate.DefaultDir()
}

// store is the state store of the runtime directory.
func store() hoststate.Store { return hoststate.Store{Dir: stateDir()} }

type (
	ctrlState    = hoststate.Controller
	nsState      = hoststate.Namespace
	pathState    = hoststate.Path
	anaNSState   = hoststate.ANANamespace
	anaGroupInfo = hoststate.ANAGroup
)

func instanceDir(dev string) string            { return store().InstanceDir(dev) }
func claimInstance() (string, error)           { return store().Claim() }
func removeInstance(dev string) error          { return store().Remove(dev) }
func writeState(st *ctrlState) error           { return store().Write(st) }
func readState(dev string) (*ctrlState, error) { return store().Read(dev) }
func instances() []string                      { return store().Instances() }
func processAlive(pid int) bool                { return hoststate.ProcessAlive(pid) }
func connectedTo(nqn, addr string) string      { return store().ConnectedTo(nqn, addr) }
func subsystemDevice(nqn string) string        { return store().SubsystemDevice(nqn) }
