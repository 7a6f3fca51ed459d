package main

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
)

// The loop-over-FUSE configurations. The default (first) is what connect
// uses; the others are kept to show why.
var stressConfigs = []struct {
	name          string
	loopDIO, fDIO bool
	defaultChoice bool
}{
	{"loop-dio+fuse-direct", true, true, true},
	{"loop-dio+fuse-cached", true, false, false},
	{"loop-buffered+fuse-direct", false, true, false},
	{"loop-buffered+fuse-cached", false, false, false},
}

// TestE2ELoopFUSEStress stresses each loop/FUSE configuration against
// nvmetd: fio with verification on the raw loop device (direct and
// buffered), fio with verification on ext4 files with fsyncs, an fsx-style
// random operation run with a model, and the unmount, disconnect,
// reconnect and verify cycle (fio --verify_only and the model).
func TestE2ELoopFUSEStress(t *testing.T) {
	needRoot(t)
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skipf("needs fio: %v", err)
	}
	for _, sc := range stressConfigs {
		t.Run(sc.name, func(t *testing.T) {
			if !sc.defaultChoice && os.Getenv("NVMEOF_STRESS_ALL") == "" {
				t.Skip("alternative configuration: set NVMEOF_STRESS_ALL=1 to stress it too")
			}
			e := newEnv(t)
			e.logOnFailure()
			tg := startNvmetd(e, freePort(t), "512MiB")
			port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
			cflags := []string{"-a", "127.0.0.1", "-s", port, "-n", tg.NQN,
				fmt.Sprintf("--loop-direct-io=%v", sc.loopDIO), fmt.Sprintf("--fuse-direct-io=%v", sc.fDIO)}
			mnt := filepath.Join(e.dir, "mnt")

			// 1. The raw loop device.
			e.must(append([]string{"connect", "--loop"}, cflags...)...)
			loop := e.list()[0].Namespaces[0].Loop
			t.Logf("%s: loop dio in sysfs: %v", loop, hostfs.LoopDirectIO(loop))
			for _, direct := range []string{"1", "0"} {
				start := time.Now()
				out := runFio(t, fio, "--name=raw", "--filename="+loop, "--direct="+direct, "--ioengine=libaio",
					"--rw=randrw", "--rwmixread=30", "--bsrange=4k-256k", "--iodepth=32", "--size=128m",
					"--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--end_fsync=1")
				t.Logf("fio raw direct=%s: %s (%v)", direct, out, time.Since(start).Round(time.Millisecond))
			}
			e.must("disconnect", "-d", "nvme0")

			// 2. ext4 on it.
			e.must(append([]string{"connect", "--mount", mnt, "--mkfs"}, cflags...)...)
			start := time.Now()
			fioFS := []string{"--name=fs", "--directory=" + mnt, "--nrfiles=8", "--size=96m", "--numjobs=2",
				"--rw=randwrite", "--bsrange=4k-128k", "--ioengine=psync", "--fsync=16", "--verify=crc32c",
				"--verify_fatal=1", "--randseed=4242"}
			out := runFio(t, fio, append(fioFS, "--do_verify=1")...)
			t.Logf("fio ext4 files with fsync: %s (%v)", out, time.Since(start).Round(time.Millisecond))
			model := fsx(t, filepath.Join(mnt, "fsx.dat"), 3000, 8<<20, 99)

			// 3. Unmount, disconnect, reconnect, verify.
			e.must("disconnect", "-d", "nvme0")
			e.must(append([]string{"connect", "--mount", mnt}, cflags...)...)
			out = runFio(t, fio, append(fioFS, "--verify_only=1")...)
			t.Logf("fio --verify_only after reconnect: %s", out)
			got, err := os.ReadFile(filepath.Join(mnt, "fsx.dat"))
			if err != nil || !bytes.Equal(got, model) {
				t.Fatalf("fsx file differs after reconnect (%d vs %d bytes, %v)", len(got), len(model), err)
			}
			if out, err := hostfs.RunTool("umount", mnt); err != nil {
				t.Fatal(out, err)
			}
			l := e.list()
			if out, err := hostfs.RunTool("e2fsck", "-fn", l[0].Namespaces[0].Loop); err != nil {
				t.Fatalf("e2fsck: %v\n%s", err, out)
			}
			e.must("disconnect", "-d", "nvme0")
		})
	}
}

// runFio runs fio and returns its summary (bandwidths), failing the test
// on a verification error.
func runFio(t *testing.T, fio string, args ...string) string {
	t.Helper()
	cmd := exec.Command(fio, append(args, "--output-format=terse", "--terse-version=3")...)
	cmd.Dir = t.TempDir() // fio writes its verify state files (*-verify.state) here
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fio %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var parts []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ";")
		if len(f) < 50 || f[0] != "3" {
			continue
		}
		if f[4] != "0" {
			t.Fatalf("fio job %s: error %s\n%s", f[2], f[4], out)
		}
		parts = append(parts, fmt.Sprintf("read %s KiB/s write %s KiB/s", f[6], f[47]))
	}
	return strings.Join(parts, "; ")
}

// fsx is an fsx-style run: random writes, truncates, reads and fsyncs on
// one file of at most maxSize bytes, checked against an in-memory model
// after every read and at the end. It returns the model.
func fsx(t *testing.T, path string, ops, maxSize int, seed uint64) []byte {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(seed, 3))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var model []byte
	for i := 0; i < ops; i++ {
		switch op := rng.IntN(10); {
		case op < 5: // write, possibly extending
			off := rng.IntN(maxSize)
			n := rng.IntN(min(64<<10, maxSize-off)) + 1
			data := make([]byte, n)
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				t.Fatalf("op %d: write: %v", i, err)
			}
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], data)
		case op < 6: // truncate
			n := rng.IntN(maxSize)
			if err := f.Truncate(int64(n)); err != nil {
				t.Fatalf("op %d: truncate: %v", i, err)
			}
			if n < len(model) {
				model = model[:n]
			} else {
				model = append(model, make([]byte, n-len(model))...)
			}
		case op < 9: // read and compare
			if len(model) == 0 {
				continue
			}
			off := rng.IntN(len(model))
			n := rng.IntN(min(128<<10, len(model)-off)) + 1
			got := make([]byte, n)
			if _, err := f.ReadAt(got, int64(off)); err != nil {
				t.Fatalf("op %d: read: %v", i, err)
			}
			if !bytes.Equal(got, model[off:off+n]) {
				t.Fatalf("op %d: read of %d bytes at %d differs from the model", i, n, off)
			}
		default:
			if err := f.Sync(); err != nil {
				t.Fatalf("op %d: fsync: %v", i, err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("fsx: file differs from the model at the end (%v)", err)
	}
	return model
}
