package daemon

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/target"
)

// TestReadyLineMkfsOnlyWhenCreated: the built-in default started twice on
// one data directory. The first start creates the image and its ready line
// offers `--mount /mnt/nvme --mkfs`; the second start's line must not (run
// again, the printed command would reformat the namespace and lose what
// was written on it).
func TestReadyLineMkfsOnlyWhenCreated(t *testing.T) {
	dir := isolate(t)
	saved := newTargetService
	t.Cleanup(func() { newTargetService = saved })
	newTargetService = func(cfg *target.Config, log *zap.Logger) (targetService, error) { return newFakeTarget(cfg), nil }
	notify, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", notify)
	data := filepath.Join(dir, "data")
	start := func() map[string]any {
		t.Helper()
		var stderr syncBuffer
		code := make(chan int, 1)
		go func() {
			code <- run([]string{"--data-dir", data, "--control-socket", filepath.Join(dir, "ctl.sock"), "--default-size", "16MiB", "--log-format", "json"}, io.Discard, &stderr)
		}()
		timeout := time.After(time.Minute)
		for ready := false; !ready; {
			select {
			case m := <-msgs:
				ready = strings.HasPrefix(m, "READY=1")
			case c := <-code:
				t.Fatalf("nvmetd exited %d:\n%s", c, stderr.String())
			case <-timeout:
				t.Fatalf("not ready:\n%s", stderr.String())
			}
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-code:
		case <-time.After(time.Minute):
			t.Fatal("no exit after SIGTERM")
		}
		for _, l := range strings.Split(stderr.String(), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(l), &e) == nil && e["msg"] == "nvmetd ready" {
				return e
			}
		}
		t.Fatalf("no ready line:\n%s", stderr.String())
		return nil
	}
	first := start()
	if c, _ := first["connect_nvmeof"].(string); !strings.HasSuffix(c, " --mount /mnt/nvme --mkfs") {
		t.Errorf("first start (image created): connect_nvmeof %q", c)
	}
	second := start()
	if c, _ := second["connect_nvmeof"].(string); strings.Contains(c, "--mkfs") || !strings.HasSuffix(c, " --mount /mnt/nvme") {
		t.Errorf("second start (the image exists): connect_nvmeof %q", c)
	}
	if m, ok := second["mkfs"]; ok {
		t.Errorf("second start still explains --mkfs: %v", m)
	}
}
