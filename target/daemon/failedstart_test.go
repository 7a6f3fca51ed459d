package daemon

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailedFirstStartRemovesImage is issue 23.14: the built-in default's
// first start on a port another process holds failed, and left its
// default-ns1.img (1 GiB at the default size) in the data directory. The
// start that fails removes the image it created; an image an earlier start
// made stays.
func TestFailedFirstStartRemovesImage(t *testing.T) {
	dir := isolate(t)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	data := filepath.Join(dir, "data")
	img := filepath.Join(data, defaultImageName)
	start := func() (int, string) {
		var stderr bytes.Buffer
		code := run([]string{"--data-dir", data, "--listen", addr, "--control-socket", filepath.Join(dir, "ctl.sock"),
			"--default-size", "16MiB", "--log-format", "console"}, io.Discard, &stderr)
		return code, stderr.String()
	}
	code, log := start()
	if code == exitOK {
		t.Fatalf("nvmetd started on a port another socket holds:\n%s", log)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Fatalf("the failed first start left %s (stat: %v):\n%s", img, err, log)
	}
	if !strings.Contains(log, "removed the default namespace image it created") {
		t.Errorf("the log does not say the image was removed:\n%s", log)
	}

	// An image that was there before the start is the admin's data.
	if err := os.WriteFile(img, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, log := start(); code == exitOK {
		t.Fatalf("nvmetd started on a busy port:\n%s", log)
	}
	if b, err := os.ReadFile(img); err != nil || !bytes.HasPrefix(b, []byte("data")) {
		t.Fatalf("a failed start removed or rewrote an image it did not create (%d bytes): %v", len(b), err)
	}
}
