package daemon

import (
	"testing"
)

// TestAuthExampleConfig checks configs/nvmetd-auth.yaml, the example with
// authenticated hosts: valid, without warnings, every host keyed, and
// authentication required.
func TestAuthExampleConfig(t *testing.T) {
	isolate(t)
	const example = "../../configs/nvmetd-auth.yaml"
	lc, err := load(t, "--config", example)
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	if len(lc.Warnings) != 0 {
		t.Errorf("warnings: %q", lc.Warnings)
	}
	cfg := lc.Target
	if !cfg.Subsystems[0].AuthRequired || !cfg.Ports[0].AuthRequired {
		t.Error("the example does not require authentication")
	}
	for _, h := range cfg.Hosts {
		if h.DHCHAPKey == "" {
			t.Errorf("host %s has no key", h.NQN)
		}
	}
}
