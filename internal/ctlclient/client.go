// Package ctlclient is a client of nvmetd's control socket: HTTP/JSON over
// a unix socket, the management API of docs/api.yaml. nvmetctl and the
// daemon's tests use it.
package ctlclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
)

// Client talks to the daemon listening on Socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// New returns a client of the control socket at socket.
func New(socket string) *Client {
	return &Client{Socket: socket, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Problem is one thing wrong with a request (the API's problems[]).
type Problem struct {
	// Field is the request's parameter ("nsid", "backend.size") where the
	// problem is inside the object the request sends or names, else the
	// configuration path.
	Field string `json:"field,omitempty"`
	// ConfigField is the configuration path
	// ("subsystems[0].namespaces[1].backend.size"), where known.
	ConfigField string `json:"config_field,omitempty"`
	Reason      string `json:"reason"`
}

// Error is an answer other than 200 OK (the API's Error schema).
type Error struct {
	// Status is the HTTP status.
	Status   int       `json:"-"`
	Message  string    `json:"error"`
	Problems []Problem `json:"problems,omitempty"`
	// Applied is true when the change was applied but what followed it
	// failed (persisting; a part of the reload).
	Applied bool `json:"applied,omitempty"`
	// GroupVersion is, for a gateway that holds the group's
	// configuration in RADOS, the version the refusal is about: the
	// stored one a change lost to (409), or the one it was based on.
	GroupVersion uint64 `json:"group_version,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// GroupStatus is the answer of GET /v1/group: the gateway group's
// configuration held in RADOS (the API's GroupStatus schema).
type GroupStatus struct {
	// Group is the gateway group's name, Object its config object.
	Group  string `json:"group"`
	Object string `json:"object"`
	// Version is the stored version of the group's configuration.
	Version uint64 `json:"version"`
	// Gateway is the gateway answering, Running the version it runs and
	// Pending a newer one it could not apply, and why.
	Gateway string `json:"gateway"`
	Running uint64 `json:"running"`
	Pending string `json:"pending,omitempty"`
	// Members are the group's gateways (their member entries) and the
	// version each runs (running.<name>; 0: none recorded).
	Members []GroupMember `json:"members"`
	// ANAGroups are the group's ANA groups as the answering gateway reads
	// their records: the preferred owner and the holder (none: unowned).
	ANAGroups []GroupANA `json:"ana_groups"`
	// Problems lists what needs an operator, one line each (empty:
	// healthy): an unowned ANA group, a gateway behind the stored version
	// or unable to apply it, the answering gateway degraded.
	Problems []string `json:"problems"`
	// Draining lists the drains still in progress, one line per drained
	// gateway that still holds ANA groups (empty: every drained gateway
	// holds none).
	Draining []string `json:"draining,omitempty"`
}

// GroupANA is one ANA group of GroupStatus.
type GroupANA struct {
	ID        uint32 `json:"id"`
	Preferred string `json:"preferred"`
	Holder    string `json:"holder,omitempty"`
	// Pinned: rebalancing never moves it (nvmetctl group pin).
	Pinned bool `json:"pinned,omitempty"`
}

// GroupMember is one gateway of GroupStatus.
type GroupMember struct {
	Name    string `json:"name"`
	Running uint64 `json:"running"`
	// Drained: under maintenance (nvmetctl gateway drain): never a
	// group's owner until undrained.
	Drained bool `json:"drained,omitempty"`
	// Alive: whether the member's watch of the config object answers the
	// liveness probes, held down (docs/rbd.md "Rebalancing"); absent when
	// the answering gateway has no settled view (gateway.rebalance: off,
	// just started, or a member of an older release).
	Alive *bool `json:"alive,omitempty"`
}

// ChangeResult is the answer to a change (the API's ChangeResult schema).
type ChangeResult struct {
	// Changes are the differences applied, as a reload logs them; empty
	// when the request changed nothing.
	Changes []string `json:"changes"`
	// Persisted is true when the configuration file was written.
	Persisted bool   `json:"persisted"`
	File      string `json:"file,omitempty"`
	// NSID is the NSID of an added namespace, PortID the ID of an added
	// port.
	NSID     uint32   `json:"nsid,omitempty"`
	PortID   uint16   `json:"port_id,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// GroupVersion is, for a gateway that holds the group's
	// configuration in RADOS, the version of it stored by the change
	// (or the one that runs, when the change stored nothing).
	GroupVersion uint64 `json:"group_version,omitempty"`
}

// Do sends method path?query with body (JSON-encoded unless nil or
// []byte) and decodes the answer into out (unless nil; a *json.RawMessage
// takes it as it is).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	u := "http://nvmetd" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.connError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("control socket %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], data...)
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("control socket %s: bad answer: %w", c.Socket, err)
	}
	return nil
}

// connError explains a failure to reach the daemon.
func (c *Client) connError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("nvmetd is not running (no control socket at %s)", c.Socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nvmetd is not running (nothing listens on %s)", c.Socket)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s: permission denied (the socket is the daemon user's only; try sudo)", c.Socket)
	}
	return fmt.Errorf("control socket %s: %w", c.Socket, err)
}

// PathEscape escapes an NQN (or any name) for a path segment.
func PathEscape(s string) string { return url.PathEscape(s) }
