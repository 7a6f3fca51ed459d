package initiator

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// In-band authentication (DH-HMAC-CHAP, NVMe Base 2.0 §8.13) of the
// host's queues, as Linux drivers/nvme/host/auth.c: after a queue's
// Connect, when the controller asks for it (ATR in the Connect response),
// the host runs one transaction of nvmeof/auth's Host on that queue before
// using it: the admin queue first, then every I/O queue. With a controller
// secret the host also authenticates the controller (bidirectional), and
// it then authenticates even when the controller did not ask: a
// controller that cannot prove it holds the key is refused. Discovery
// controllers are authenticated only when they ask.

// AuthError is a queue whose authentication failed: the controller
// refused the host's response (AUTH_Failure1), the controller's own
// response was wrong, or a command of the transaction failed.
type AuthError struct {
	// QID is the queue (0 = admin).
	QID uint16
	// SubNQN is the subsystem.
	SubNQN string
	// Err is the cause: an *auth.Error, or a transport error.
	Err error
}

// Error describes the failure.
func (e *AuthError) Error() string {
	return fmt.Sprintf("authentication (qid %d) to %s failed: %v", e.QID, e.SubNQN, e.Err)
}

// Unwrap returns the cause.
func (e *AuthError) Unwrap() error { return e.Err }

// ErrNoSecret is the cause of an AuthError when the controller requires
// authentication and the host has no DH-HMAC-CHAP secret.
var ErrNoSecret = errors.New("the controller requires authentication and no DH-HMAC-CHAP secret is configured (--dhchap-secret)")

// needsAuth reports whether the host authenticates a queue whose Connect
// answered resp.
func (c *Controller) needsAuth(resp nvmeof.ConnectResponse) bool {
	_, ctrl := c.secrets()
	return resp.ATR() || (ctrl != nil && !c.cfg.Discovery())
}

// secrets returns the DH-HMAC-CHAP secrets in use.
func (c *Controller) secrets() (host, ctrl *auth.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.DHCHAPSecret, c.cfg.DHCHAPCtrlSecret
}

// SetSecrets replaces the DH-HMAC-CHAP secrets (Linux: writing the
// controller's dhchap_secret and dhchap_ctrl_secret in sysfs): they apply
// from the next authentication, a reconnect or Reauthenticate.
func (c *Controller) SetSecrets(host, ctrl *auth.Secret) error {
	if ctrl != nil && host == nil {
		return errors.New("initiator: a DH-HMAC-CHAP controller secret needs a host secret")
	}
	for _, s := range []*auth.Secret{host, ctrl} {
		if s != nil {
			if err := s.Validate(); err != nil {
				return fmt.Errorf("initiator: %w", err)
			}
		}
	}
	c.mu.Lock()
	c.cfg.DHCHAPSecret, c.cfg.DHCHAPCtrlSecret = host, ctrl
	c.mu.Unlock()
	return nil
}

// authenticate runs one DH-HMAC-CHAP transaction on queue qid
// (nvme_auth_negotiate and nvme_auth_wait). Each command is bounded by the
// admin timeout.
func (c *Controller) authenticate(ctx context.Context, hq hostQueue, qid uint16) error {
	fail := func(err error) error { return &AuthError{QID: qid, SubNQN: c.cfg.SubNQN, Err: err} }
	secret, ctrlSecret := c.secrets()
	if secret == nil {
		return fail(ErrNoSecret)
	}
	h, err := auth.NewHost(auth.HostConfig{
		HostNQN: c.cfg.HostNQN, SubNQN: c.cfg.SubNQN,
		Secret: secret, CtrlSecret: ctrlSecret,
	})
	if err != nil {
		return fail(err)
	}
	// Transaction IDs count per controller, across its queues (Linux
	// ctrl->transaction).
	step := h.Start(uint16(c.authTID.Add(1)))
	for {
		var r *nvmeof.HostRequest
		switch step.Action {
		case auth.HostSend:
			r = &nvmeof.HostRequest{Data: step.Data, Write: true}
			r.SQE.BuildAuthSend(uint32(len(step.Data)))
		case auth.HostReceive:
			r = &nvmeof.HostRequest{Data: make([]byte, step.AllocLen)}
			r.SQE.BuildAuthReceive(step.AllocLen)
		default: // auth.HostDone
			if step.Err != nil {
				return fail(step.Err)
			}
			hash, group := h.Negotiated()
			c.log.Debug("queue authenticated", zap.Uint16("qid", qid), zap.Stringer("hash", hash), zap.Stringer("dhgroup", group),
				zap.Bool("bidirectional", ctrlSecret != nil))
			return nil
		}
		st, err := c.authDo(ctx, hq, r)
		if err != nil {
			if hd, perr := auth.ParseHeader(r.Data); perr == nil && r.Write && hd.Type == auth.TypeCommon && hd.ID == auth.MsgFailure2 {
				// The host was reporting a failure (the controller's
				// response was wrong): nvmet tears the controller down on
				// AUTH_Failure2, maybe before it answers. The failure is
				// the cause, not the lost connection.
				if done := h.Complete(nvmeof.StatusSuccess, nil); done.Err != nil {
					return fail(done.Err)
				}
			}
			h.Expire()
			return fail(err)
		}
		step = h.Complete(st, r.Data)
	}
}

// authDo runs one authentication command: its NVMe status, or a transport
// error.
func (c *Controller) authDo(ctx context.Context, hq hostQueue, r *nvmeof.HostRequest) (nvmeof.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AdminTimeout)
	defer cancel()
	err := hq.Do(ctx, r)
	var st nvmeof.Status
	switch {
	case err == nil:
		return nvmeof.StatusSuccess, nil
	case errors.As(err, &st) && r.Err == nil:
		return st, nil
	}
	return 0, err
}

// Reauthenticate runs a new authentication transaction on every queue of
// the current association (the admin queue first), as Linux does when its
// dhchap keys are changed through sysfs. The controller must have been
// authenticated, or have asked for it, and the host must have a secret.
func (c *Controller) Reauthenticate(ctx context.Context) error {
	a, err := c.liveAssociation()
	if err != nil {
		return err
	}
	if err := c.authenticate(ctx, a.admin, 0); err != nil {
		return err
	}
	for i, hq := range a.io {
		if err := c.authenticate(ctx, hq, uint16(i+1)); err != nil {
			return err
		}
	}
	return nil
}
