package connd

import (
	"context"
	"fmt"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Bench connects to the subsystem of cfg in this process (no daemon, no
// state in s), runs the load p on namespace p.NSID (0: the first) and
// closes the association. A load that writes is refused on a namespace
// already attached on this host through one of s's controllers (it would
// write under its filesystem), unless p.Force. started is called before the
// load with the resolved parameters and the target's name; progress
// receives bench.Run's progress lines.
func Bench(ctx context.Context, s hoststate.Store, cfg initiator.Config, p bench.Params, started func(p bench.Params, target string), progress func(string)) (*bench.Result, error) {
	sub := initiator.NewSubsystem(cfg.SubNQN, initiator.MultipathConfig{Logger: cfg.Logger})
	defer sub.Close(ctx)
	if _, err := sub.AddPath(ctx, cfg); err != nil {
		return nil, err
	}
	ns := sub.Namespace(p.NSID)
	if p.NSID == 0 && len(sub.Namespaces()) > 0 {
		ns = sub.Namespaces()[0]
		p.NSID = ns.NSID()
	}
	if ns == nil {
		return nil, fmt.Errorf("no namespace %d", p.NSID)
	}
	if !p.Force && p.Writes() {
		ids := ns.Identifiers()
		n := hoststate.Namespace{NSID: ns.NSID()}
		if ids.HasNGUID {
			n.NGUID = fmt.Sprintf("%x", ids.NGUID)
		}
		if ids.HasUUID {
			n.UUID = nvmeof.FormatUUID(ids.UUID)
		}
		if err := attachedElsewhere(s, "", []hoststate.Namespace{n}); err != nil {
			return nil, fmt.Errorf("%w; a load that writes would write under it (a read-only load, --rw read or randread, runs; --force to run anyway)", err)
		}
	}
	started(p, cfg.SubNQN+" at "+cfg.Address)
	return bench.Run(ctx, ns, p, progress)
}
