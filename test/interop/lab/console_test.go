package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFirstKernelErrorCapturedOops: the console of a 6.12 TCG guest that
// oopsed (captured in the lab: a static key toggled while both vCPUs ran,
// "Oops: int3: 0000 [#1]" then "Fatal exception in interrupt"). The
// excerpt starts before the oops (the boot lines, fewer than crashBefore),
// keeps the oops and the panic, and the cause is named under TCG only.
func TestFirstKernelErrorCapturedOops(t *testing.T) {
	console := readTestdata(t, "console-6.12-tcg-int3.txt")
	ex := FirstKernelError(console)
	for _, want := range []string{
		"Kernel command line:", // context before the oops: the whole boot, here
		"nvmetd-lab: guest ready",
		"Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
		"RIP: 0010:__schedule+0x98/0xbf0",
		"Kernel panic - not syncing: Fatal exception in interrupt",
	} {
		if !strings.Contains(ex, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, ex)
		}
	}
	if strings.Contains(ex, "left out") {
		t.Errorf("a short console was cut:\n%s", ex)
	}
	if c := KnownCause(console, "tcg"); !strings.Contains(c, "deba78709ae8") {
		t.Errorf("KnownCause(tcg) = %q, want the QEMU TCG int3 race named", c)
	}
	if c := KnownCause(console, "kvm"); c != "" {
		t.Errorf("KnownCause(kvm) = %q, want none (the race is TCG's)", c)
	}
}

// TestFirstKernelErrorCleanConsole: a console with no kernel error (a 6.12
// run of LinuxHostTCPReconnect in which the clocksource watchdog marked the
// TSC unstable: warnings, not a kernel error report) gives no excerpt, and
// the init script's own lines cannot match.
func TestFirstKernelErrorCleanConsole(t *testing.T) {
	console := readTestdata(t, "console-6.12-tsc-unstable.txt")
	if !strings.Contains(console, "Marking clocksource 'tsc' as unstable") {
		t.Fatal("testdata: not the console it should be")
	}
	if ex := FirstKernelError(console); ex != "" {
		t.Errorf("excerpt of a console without a kernel error:\n%s", ex)
	}
	console += "nvmetd-lab: WARNING: CPU: 0 BUG: Oops: int3: 0000 [#1] (the init script, not the kernel)\n"
	if ex := FirstKernelError(console); ex != "" {
		t.Errorf("excerpt from a line that is not the kernel's:\n%s", ex)
	}
	if c := KnownCause(console, "tcg"); c != "" {
		t.Errorf("KnownCause = %q for a console without a kernel error", c)
	}
}

// TestFirstKernelErrorCITail: the last 30 lines the CI kept of session 8's
// crash start in the middle of oops #1's stack; the excerpt starts at the
// first kernel error in them, "Oops: int3: 0000 [#2]", keeping what came
// before. Oops #2 is not named as the TCG race: a second oops may be a
// consequence of any first one, which the CI did not keep.
func TestFirstKernelErrorCITail(t *testing.T) {
	console := readTestdata(t, "console-6.12-ci-tail.txt")
	ex := FirstKernelError(console)
	if !strings.HasPrefix(ex, "[  162.231883]  kthread+0xd2/0x100") || !strings.Contains(ex, "Oops: int3: 0000 [#2]") {
		t.Errorf("excerpt:\n%s", ex)
	}
	if c := KnownCause(console, "tcg"); c != "" {
		t.Errorf("KnownCause = %q; the first oops here is #2, and #1 is not in the log", c)
	}
}

// TestFirstKernelErrorLongConsole: a long console: crashBefore lines of
// context before the first error (an earlier 6.1-style die() header, no
// "Oops: " prefix), crashAfter lines from it, then the last crashTail
// lines (the final panic), with what is left out counted.
func TestFirstKernelErrorLongConsole(t *testing.T) {
	var b strings.Builder
	ts := 0
	line := func(s string) { ts++; fmt.Fprintf(&b, "[%5d.%06d] %s\n", ts, 0, s) }
	for i := 0; i < 500; i++ {
		line(fmt.Sprintf("boot line %d", i))
	}
	line("BUG: kernel NULL pointer dereference, address: 0000000000000008")
	line("general protection fault: 0000 [#1] PREEMPT SMP NOPTI")
	for i := 0; i < 1000; i++ {
		line(fmt.Sprintf("after line %d", i))
	}
	line("Kernel panic - not syncing: Fatal exception")
	ex := FirstKernelError(b.String())
	lines := strings.Split(ex, "\n")
	if want := "[... 420 earlier console lines left out ...]"; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if !strings.HasSuffix(lines[1], "boot line 420") || !strings.HasSuffix(lines[1+crashBefore], "BUG: kernel NULL pointer dereference, address: 0000000000000008") {
		t.Errorf("context: %q ... %q", lines[1], lines[1+crashBefore])
	}
	if !strings.HasSuffix(lines[len(lines)-1], "Kernel panic - not syncing: Fatal exception") {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
	// 1003 lines from the BUG line on: crashAfter kept, crashTail kept.
	if want := fmt.Sprintf("[... %d console lines left out ...]", 1003-crashAfter-crashTail); !strings.Contains(ex, want) {
		t.Errorf("no %q in the excerpt", want)
	}
	if n := len(lines); n != 1+crashBefore+crashAfter+1+crashTail {
		t.Errorf("%d lines, want %d", n, 1+crashBefore+crashAfter+1+crashTail)
	}
	// The 6.1 header form of the TCG race is recognized too.
	c61 := "[    9.1] int3: 0000 [#1] PREEMPT SMP NOPTI\n[    9.2] RIP: 0010:__schedule+0x98/0xbf0\n"
	if FirstKernelError(c61) == "" || KnownCause(c61, "tcg") == "" {
		t.Errorf("6.1's int3 header is not recognized")
	}
}

// TestCrashReportKeepsConsole: the report of a dead VM names where its
// whole console was kept, and the copy survives the runtime directory.
func TestCrashReportKeepsConsole(t *testing.T) {
	run := t.TempDir()
	keep := t.TempDir()
	t.Setenv("NVMETD_LAB_CONSOLE_DIR", keep)
	console := readTestdata(t, "console-6.12-tcg-int3.txt")
	if err := os.WriteFile(filepath.Join(run, "console.log"), []byte(console), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "accel"), []byte("tcg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vm := &VM{name: "vm", kernel: "6.12", release: "6.12.117+deb12-amd64", runDir: run}
	rep := vm.crashReport()
	for _, want := range []string{"whole console log kept in " + keep, "KNOWN CAUSE:", "Oops: int3: 0000 [#1]"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(keep, "vm-6_12_117_deb12-amd64-*.console.log"))
	if len(files) != 1 {
		t.Fatalf("kept consoles: %v", files)
	}
	if b, err := os.ReadFile(files[0]); err != nil || string(b) != console {
		t.Errorf("kept console differs from the VM's (%v)", err)
	}
}
