package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway/gwtarget"
	"github.com/nvmetd/nvmetd/target"
)

// The gateway group's own state through the management API (docs/rbd.md
// "Maintenance: drain and rolling upgrade"): an ANA group's preferred
// owner (PUT /v1/group/ana_groups/{id}) and a member's drain
// (POST /v1/gateways/{name}/drain, .../undrain). Each is a version of the
// group's configuration held in RADOS, made through any gateway.

func (m mgmtView) SetPreferred(r *http.Request, id uint32, name string) (any, error) {
	return m.d.groupState(r, fmt.Sprintf("ANA group %d: preferred owner %s", id, name), gwtarget.SetPreferredEdit(id, name))
}

func (m mgmtView) SetANAGroup(r *http.Request, id uint32, preferred string, pinned bool) (any, error) {
	what := fmt.Sprintf("ANA group %d: pinned", id)
	if !pinned {
		what = fmt.Sprintf("ANA group %d: unpinned", id)
	}
	pin := gwtarget.PinEdit(id, pinned)
	if preferred == "" {
		return m.d.groupState(r, what, pin)
	}
	set := gwtarget.SetPreferredEdit(id, preferred)
	return m.d.groupState(r, what+fmt.Sprintf(", preferred owner %s", preferred), func(d *gwtarget.GroupDoc, v gwtarget.GroupView) error {
		if err := set(d, v); err != nil {
			return err
		}
		return pin(d, v)
	})
}

func (m mgmtView) Drain(r *http.Request, name string, drain bool) (any, error) {
	what := "drain " + name
	if !drain {
		what = "undrain " + name
	}
	return m.d.groupState(r, what, gwtarget.DrainEdit(name, drain))
}

func (m mgmtView) SpreadANAGroup(c *target.Config) uint32 { return m.d.gw.SpreadANAGroup(c) }

// groupState stores edit as a version of the group's configuration based
// on ?group_version= (default: the version this gateway runs).
func (d *daemon) groupState(r *http.Request, what string, edit gwtarget.GroupEdit) (any, error) {
	if d.gw == nil {
		return nil, &apiError{Status: http.StatusNotFound, Message: "this nvmetd is not a member of a gateway group (no gateway section)"}
	}
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	if d.stopping.Load() {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Message: "nvmetd is shutting down"}
	}
	if !d.gw.RADOSHeld() {
		return nil, &apiError{Status: http.StatusConflict, Message: what + ": " + gwtarget.ErrNotRADOSHeld.Error()}
	}
	base := d.gw.GroupVersion()
	if q := r.URL.Query().Get("group_version"); q != "" {
		b, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			return nil, &apiError{Status: http.StatusBadRequest, Message: "group_version: " + err.Error()}
		}
		base = b
	}
	v, changed, err := d.gw.ChangeGroupState(base, what, edit)
	switch {
	case errors.Is(err, gwtarget.ErrNoSuchMember), errors.Is(err, gwtarget.ErrNoSuchANAGroup):
		return nil, &apiError{Status: http.StatusNotFound, Message: err.Error(), GroupVersion: base}
	case errors.Is(err, gwtarget.ErrLastServer):
		d.log.Info("management API: refused: "+what, zap.Error(err))
		return nil, &apiError{Status: http.StatusConflict, Message: err.Error(), GroupVersion: base}
	case err != nil:
		return nil, groupError(d, err, base)
	}
	res := &changeResult{Changes: []string{}, GroupVersion: v}
	if changed {
		res.Changes = append(res.Changes, what)
		d.log.Info("management API: "+what, zap.Uint64("version", v))
	}
	return res, nil
}
