//go:build !rbd

package backend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// TestRBDNotBuilt: without the rbd build tag, kind rbd validates but fails
// to open with an error that names the tag.
func TestRBDNotBuilt(t *testing.T) {
	cfg := backend.Config{Kind: backend.KindRBD, Pool: "rbd", Image: "vm1"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	b, err := backend.Open(cfg)
	if b != nil || !errors.Is(err, backend.ErrRBDNotBuilt) || !strings.Contains(err.Error(), "-tags "+backend.RBDBuildTag) {
		t.Errorf("Open = %v, %v; want nil and ErrRBDNotBuilt naming the build tag", b, err)
	}
	// Configuration errors still come first.
	cfg.Image = ""
	if _, err := backend.Open(cfg); !strings.Contains(err.Error(), "image: required") {
		t.Errorf("Open without an image: %v", err)
	}
}
