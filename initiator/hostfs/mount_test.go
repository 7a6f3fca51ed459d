package hostfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProbeSignatures: the magic numbers --mkfs refuses to write over,
// found in images made by the real tools where they are installed, and in
// hand-written ones otherwise; a zeroed image holds nothing.
func TestProbeSignatures(t *testing.T) {
	dir := t.TempDir()
	image := func(name string) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err == nil {
			err = f.Truncate(128 << 20) // sparse
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	probe := func(p string) []string {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return probeSignatures(f)
	}
	if got := probe(image("blank")); len(got) != 0 {
		t.Errorf("blank image: %v", got)
	}
	for _, tc := range []struct {
		tool string
		args []string
		want string
		// Without the tool (or if it fails here): the magic by hand.
		off   int64
		magic string
	}{
		{"mkfs.ext4", []string{"-F", "-q"}, "ext2/ext3/ext4", 0x438, "\x53\xef"},
		{"mkfs.ext2", []string{"-F", "-q"}, "ext2/ext3/ext4", 0x438, "\x53\xef"},
		{"mkfs.xfs", []string{"-f", "-q"}, "XFS", 0, "XFSB"},
		{"mkfs.btrfs", []string{"-f", "-q"}, "btrfs", 0x10040, "_BHRfS_M"},
		{"mkswap", nil, "swap", 4086, "SWAPSPACE2"},
		{"sfdisk", nil, "MBR", 510, "\x55\xaa"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			p := image(tc.tool)
			cmd := exec.Command(tc.tool, append(tc.args, p)...)
			if tc.tool == "sfdisk" {
				cmd.Stdin = strings.NewReader("label: dos\n,64M,L\n")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("%s: %v %s: the signature by hand", tc.tool, err, strings.TrimSpace(string(out)))
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.WriteAt([]byte(tc.magic), tc.off)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := probe(p); !strings.Contains(strings.Join(got, ","), tc.want) {
				t.Errorf("%s image: found %v, want %s", tc.tool, got, tc.want)
			}
		})
	}
	t.Run("gpt", func(t *testing.T) {
		p := image("gpt")
		if sf, err := exec.LookPath("sfdisk"); err == nil {
			cmd := exec.Command(sf, p)
			cmd.Stdin = strings.NewReader("label: gpt\n,64M\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sfdisk: %v\n%s", err, out)
			}
		} else {
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			_, _ = f.WriteAt([]byte("EFI PART"), 512)
			f.Close()
		}
		if got := strings.Join(probe(p), ","); !strings.Contains(got, "GPT") {
			t.Errorf("GPT image: found %v", got)
		}
	})
}
