package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/target"
)

// Loopback end-to-end tests of DH-HMAC-CHAP between the initiator and the
// target: every hash and DH group, unidirectional and bidirectional, and
// the failures a host sees.

// newKey makes a host key as nvme gen-dhchap-key does (transformed with
// the host NQN when h is not HashNone).
func newKey(t testing.TB, h auth.Hash) string {
	t.Helper()
	k, err := auth.GenerateKey(auth.KeyOptions{HMAC: int(h), NQN: testHostNQN}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustSecret(t testing.TB, s string) *auth.Secret {
	t.Helper()
	sec, err := auth.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// withHostKeys gives testHostNQN keys at the target.
func withHostKeys(key, ctrlKey, hash, group string) targetOption {
	return withConfig(func(c *target.Config) {
		c.Hosts = append(c.Hosts, target.HostConfig{NQN: testHostNQN, DHCHAPKey: key, DHCHAPCtrlKey: ctrlKey, DHCHAPHash: hash, DHCHAPDHGroup: group})
	})
}

// authConfig is testConfig with secrets and a long keep-alive timeout (the
// target's authentication timeout follows KATO; a loaded machine may
// take seconds for ffdhe8192 under the race detector).
func authConfig(t testing.TB, addr string, key, ctrlKey string) Config {
	cfg := testConfig(t, addr)
	cfg.NrIOQueues = 1
	cfg.KeepAliveTimeout = time.Minute
	cfg.NoReconnect = true
	if key != "" {
		cfg.DHCHAPSecret = mustSecret(t, key)
	}
	if ctrlKey != "" {
		cfg.DHCHAPCtrlSecret = mustSecret(t, ctrlKey)
	}
	return cfg
}

// checkIO writes and reads back a block through the controller.
func checkIO(t testing.TB, c *Controller) {
	t.Helper()
	ns := c.Namespace(1)
	if ns == nil {
		t.Fatal("no namespace 1")
	}
	buf := make([]byte, 4096)
	rand.Read(buf)
	if _, err := ns.WriteAt(buf, 8192); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if _, err := ns.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("read back differs")
	}
}

// TestAuthMatrix: every hash × DH group, unidirectional and bidirectional
// (the bidirectional half alternates, so each hash and each group is also
// run bidirectionally). The admin queue and the I/O queue authenticate.
func TestAuthMatrix(t *testing.T) {
	hashes := []auth.Hash{auth.HashSHA256, auth.HashSHA384, auth.HashSHA512}
	i := 0
	for _, g := range auth.AllDHGroups {
		for _, h := range hashes {
			bidi := i%2 == 1
			i++
			name := fmt.Sprintf("%v/%v/bidi=%v", h, g, bidi)
			t.Run(name, func(t *testing.T) {
				// Keys transformed with another hash than the one
				// negotiated, as happens in practice.
				key := newKey(t, hashes[(i+1)%3])
				ctrlKey := ""
				if bidi {
					ctrlKey = newKey(t, auth.HashNone)
				}
				tt := startTarget(t, withHostKeys(key, ctrlKey, "hmac("+map[auth.Hash]string{auth.HashSHA256: "sha256", auth.HashSHA384: "sha384", auth.HashSHA512: "sha512"}[h]+")", g.String()))
				c := connect(t, authConfig(t, tt.Addr(), key, ctrlKey))
				// Negotiate, Challenge, Reply, Success1 (and Success2)
				// on the admin queue and on the I/O queue.
				wantSends := 2 * 2
				if bidi {
					wantSends = 2 * 3
				}
				if n := tt.FabricsCommands(nvmeof.FCTypeAuthSend); n != wantSends {
					t.Errorf("%d Authentication Sends, want %d", n, wantSends)
				}
				checkIO(t, c)
			})
		}
	}
}

// connectErr connects, expecting a failure.
func connectErr(t *testing.T, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, cfg)
	if err == nil {
		_ = c.Close(ctx)
		t.Fatal("connected")
	}
	return err
}

// TestAuthFailures: what a host sees when authentication fails, and that
// the target holds nothing of it afterwards.
func TestAuthFailures(t *testing.T) {
	key, ctrlKey := newKey(t, auth.HashSHA256), newKey(t, auth.HashNone)
	other := newKey(t, auth.HashSHA256)
	t.Run("wrong key", func(t *testing.T) {
		tt := startTarget(t, withHostKeys(key, "", "", "ffdhe2048"))
		err := connectErr(t, authConfig(t, tt.Addr(), other, ""))
		var ae *AuthError
		var e *auth.Error
		if !errors.As(err, &ae) || ae.QID != 0 || !errors.As(err, &e) || !e.Remote || e.Explanation != auth.ExplFailed {
			t.Fatalf("%v, want an AUTH_Failure1 (failed) on the admin queue", err)
		}
		waitFor(t, "controller torn down", func() bool { return tt.Controllers() == 0 })
	})
	t.Run("wrong controller key", func(t *testing.T) {
		tt := startTarget(t, withHostKeys(key, ctrlKey, "", ""))
		err := connectErr(t, authConfig(t, tt.Addr(), key, other))
		var e *auth.Error
		if !errors.As(err, &e) || e.Remote || e.Explanation != auth.ExplFailed {
			t.Fatalf("%v, want the host to refuse the controller's response", err)
		}
		waitFor(t, "controller torn down", func() bool { return tt.Controllers() == 0 })
	})
	t.Run("controller without controller key", func(t *testing.T) {
		tt := startTarget(t, withHostKeys(key, "", "", ""))
		err := connectErr(t, authConfig(t, tt.Addr(), key, ctrlKey))
		var e *auth.Error
		if !errors.As(err, &e) || !e.Remote {
			t.Fatalf("%v, want AUTH_Failure1 (no controller key)", err)
		}
	})
	t.Run("host without key", func(t *testing.T) {
		tt := startTarget(t, withHostKeys(key, "", "", ""))
		err := connectErr(t, authConfig(t, tt.Addr(), "", ""))
		if !errors.Is(err, ErrNoSecret) {
			t.Fatalf("%v, want ErrNoSecret", err)
		}
	})
	t.Run("target without key, auth required", func(t *testing.T) {
		tt := startTarget(t, withConfig(func(c *target.Config) { c.Subsystems[0].AuthRequired = true }))
		err := connectErr(t, authConfig(t, tt.Addr(), key, ""))
		var e *auth.Error
		if !errors.As(err, &e) || !e.Remote {
			t.Fatalf("%v, want AUTH_Failure1 (no host key)", err)
		}
	})
	t.Run("host key, target does not ask", func(t *testing.T) {
		// As Linux: a host secret alone does not make the host
		// authenticate a controller that does not ask.
		tt := startTarget(t)
		c := connect(t, authConfig(t, tt.Addr(), key, ""))
		checkIO(t, c)
		if n := tt.FabricsCommands(nvmeof.FCTypeAuthSend); n != 0 {
			t.Errorf("%d Authentication Sends, want none", n)
		}
	})
}

// waitFor polls cond for up to a minute (a hang guard, not a timing).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAuthKeyRotation: a reload that changes the host's key (in a file)
// keeps the authenticated host connected; new associations need the new
// key; the connected host re-authenticates with it.
func TestAuthKeyRotation(t *testing.T) {
	oldKey, newK := newKey(t, auth.HashSHA256), newKey(t, auth.HashSHA384)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "host.key")
	if err := os.WriteFile(keyFile, []byte(oldKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tt := startTarget(t, withHostKeys("file:"+keyFile, "", "", "ffdhe2048"))
	c := connect(t, authConfig(t, tt.Addr(), oldKey, ""))
	checkIO(t, c)
	// Same configuration, new file content.
	if err := os.WriteFile(keyFile, []byte(newK+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tt.Reload(func(*target.Config) {})
	checkIO(t, c)
	if c.State() != StateLive || tt.Controllers() != 1 {
		t.Fatalf("state %v, %d controllers after the reload", c.State(), tt.Controllers())
	}
	err := connectErr(t, authConfig(t, tt.Addr(), oldKey, ""))
	var e *auth.Error
	if !errors.As(err, &e) || !e.Remote {
		t.Fatalf("old key: %v, want AUTH_Failure1", err)
	}
	c2 := connect(t, authConfig(t, tt.Addr(), newK, ""))
	checkIO(t, c2)
	// The first host re-authenticates with the new key.
	if err := c.SetSecrets(mustSecret(t, newK), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Reauthenticate(ctx); err != nil {
		t.Fatal(err)
	}
	checkIO(t, c)

	// A key file others may read is refused, and the reload with it.
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tt.tg.Reload(tt.cfg); err == nil || !errors.Is(err, target.ErrReloadRefused) {
		t.Fatalf("reload with a world-readable key file: %v", err)
	}
	checkIO(t, c)
}

// TestAuthTurnedOnByReload: a reload that gives a connected host a key and
// requires authentication leaves its association alone (nvmet's soft
// state); a new association needs the key.
func TestAuthTurnedOnByReload(t *testing.T) {
	key := newKey(t, auth.HashSHA256)
	tt := startTarget(t)
	c := connect(t, authConfig(t, tt.Addr(), "", ""))
	checkIO(t, c)
	tt.Reload(func(cfg *target.Config) {
		cfg.Subsystems[0].AuthRequired = true
		cfg.Hosts = append(cfg.Hosts, target.HostConfig{NQN: testHostNQN, DHCHAPKey: key})
	})
	checkIO(t, c)
	if err := connectErr(t, authConfig(t, tt.Addr(), "", "")); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("a new association without a secret: %v", err)
	}
	checkIO(t, connect(t, authConfig(t, tt.Addr(), key, "")))
	checkIO(t, c)
}
