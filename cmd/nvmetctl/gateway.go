package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nvmetd/nvmetd/internal/ctlclient"
)

// The gateway group's maintenance (docs/rbd.md "Maintenance: drain and
// rolling upgrade"): drain and undrain a gateway, move an ANA group to
// another preferred owner. Each is a version of the group's configuration
// held in RADOS, made through any gateway (based on the stored version,
// as --group, or --group-version).

// waitPoll is how often --wait reads the group's state.
const waitPoll = 500 * time.Millisecond

func (a *app) gatewayCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "gateway", Short: "maintenance of a gateway of the gateway group: drain, undrain"}
	var wait time.Duration
	mk := func(use string, drain bool, short string) *cobra.Command {
		c := &cobra.Command{Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				name := args[0]
				a.group = true
				if err := a.change("POST", "/v1/gateways/"+esc(name)+"/"+use, nil); err != nil {
					return err
				}
				if wait <= 0 {
					return nil
				}
				if drain {
					return a.waitGroup(wait, "every ANA group of "+name+" to be held by another gateway", func(st *ctlclient.GroupStatus) bool {
						for _, g := range st.ANAGroups {
							if g.Holder == "" || g.Holder == name {
								return false
							}
						}
						return true
					})
				}
				return a.waitGroup(wait, "the ANA groups "+name+" prefers to be held by it", func(st *ctlclient.GroupStatus) bool {
					for _, g := range st.ANAGroups {
						if g.Preferred == name && g.Holder != name {
							return false
						}
					}
					return true
				})
			}}
		c.Flags().DurationVar(&wait, "wait", 0, "then wait up to this long until the groups moved (0: do not wait)")
		return c
	}
	cmd.AddCommand(
		mk("drain", true, "drain a gateway: it hands each ANA group it owns to another member (graceful, fenced) and owns none until undrained, across its restarts"),
		mk("undrain", false, "undrain a gateway: its failback brings its preferred ANA groups back"))
	return cmd
}

// groupMoveCommand makes a gateway the preferred owner of an ANA group:
// the group moves there by the failback path once that gateway can serve
// it (a host connected to it, its namespaces open, its failback delay).
func (a *app) groupMoveCommand() *cobra.Command {
	var wait time.Duration
	var pinned bool
	c := &cobra.Command{Use: "move ANAGRPID GATEWAY", Short: "make GATEWAY the preferred owner of an ANA group: it moves there by a graceful, fenced failback",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return fmt.Errorf("ANAGRPID %q: not an ANA group ID", args[0])
			}
			name := args[1]
			a.group = true
			body := map[string]any{"preferred": name}
			if pinned {
				body["pinned"] = true
			}
			if err := a.change("PUT", fmt.Sprintf("/v1/group/ana_groups/%d", id), body); err != nil {
				return err
			}
			if wait <= 0 {
				return nil
			}
			return a.waitGroup(wait, fmt.Sprintf("ANA group %d to be held by %s", id, name), func(st *ctlclient.GroupStatus) bool {
				for _, g := range st.ANAGroups {
					if uint64(g.ID) == id {
						return g.Holder == name
					}
				}
				return false
			})
		}}
	c.Flags().DurationVar(&wait, "wait", 0, "then wait up to this long until the group is held there (0: do not wait)")
	c.Flags().BoolVar(&pinned, "pinned", false, "also pin the group there: automatic rebalancing never moves it (nvmetctl group unpin)")
	return c
}

// groupPinCommand pins (or unpins) an ANA group: rebalancing never moves
// a pinned group (docs/rbd.md "Rebalancing").
func (a *app) groupPinCommand(pin bool) *cobra.Command {
	use, short := "pin ANAGRPID", "pin an ANA group: automatic rebalancing never moves it (nvmetctl group move still does)"
	if !pin {
		use, short = "unpin ANAGRPID", "unpin an ANA group: automatic rebalancing may move it again"
	}
	return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return fmt.Errorf("ANAGRPID %q: not an ANA group ID", args[0])
			}
			a.group = true
			return a.change("PUT", fmt.Sprintf("/v1/group/ana_groups/%d", id), map[string]any{"pinned": pin})
		}}
}

// waitGroup reads the group's state until done says so, for at most d.
func (a *app) waitGroup(d time.Duration, what string, done func(*ctlclient.GroupStatus) bool) error {
	deadline := time.Now().Add(d)
	var last ctlclient.GroupStatus
	for {
		var st ctlclient.GroupStatus
		err := a.call("GET", "/v1/group", nil, nil, &st)
		if err == nil {
			if done(&st) {
				fmt.Fprintf(a.stdout, "done: %s\n", holders(&st))
				return nil
			}
			last = st
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("waited %s for %s: %w", d, what, err)
			}
			return fmt.Errorf("waited %s for %s: %s", d, what, holders(&last))
		}
		time.Sleep(waitPoll)
	}
}

// holders is "ANA group 1: gw-b, 2: gw-b".
func holders(st *ctlclient.GroupStatus) string {
	var p []string
	for _, g := range st.ANAGroups {
		h := g.Holder
		if h == "" {
			h = "none"
		}
		p = append(p, fmt.Sprintf("%d: %s", g.ID, h))
	}
	return "holders of ANA group " + strings.Join(p, ", ")
}
