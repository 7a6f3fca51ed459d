package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// kernelErrorLine matches the first line of a kernel error report on the
// serial console: an oops (die()'s header, "int3: 0000 [#1] ..." on 6.1,
// "Oops: int3: 0000 [#1] ..." on 6.12; "BUG: unable to handle page fault",
// "kernel BUG at"), a general protection fault, a WARN splat ("WARNING: CPU:
// 0 PID: 1 at ...") or a panic. Only kernel lines count (they start with the
// printk timestamp), so that the init script's own messages on the console
// cannot match.
var kernelErrorLine = regexp.MustCompile(`^\[\s*\d+\.\d+\] .*(: [0-9a-f]{4} \[#\d+\]|\bBUG: |\bkernel BUG at |\bgeneral protection fault|\bWARNING: CPU: |\bKernel panic - )`)

// tcgInt3 matches die()'s header for a breakpoint trap that no kernel
// handler claimed: what a vCPU reports when it executes the transient int3
// of the kernel's runtime code patching (text_poke_bp) after the patch is
// done, the QEMU multi-threaded TCG race described at KnownCause.
var tcgInt3 = regexp.MustCompile(`^\[\s*\d+\.\d+\] (Oops: )?int3: [0-9a-f]{4} \[#1\]`)

// Crash excerpt limits: lines of context kept before the first kernel
// error (what the kernel logged just before it: the nvme reconnect, a
// hung task...), and lines kept from it on before the excerpt skips to the
// console's last lines (the final panic).
const (
	crashBefore = 80
	crashAfter  = 250
	crashTail   = 30
)

// FirstKernelError returns the part of a serial console log that explains a
// guest crash: from crashBefore lines before the first kernel error report
// (see kernelErrorLine) to the end of the log, with the middle left out when
// that is more than crashAfter+crashTail lines (the first report and the
// last lines, where the final panic is, are kept). It returns "" if the log
// has no kernel error report. The first report is the one that matters: a
// later one (an "Oops: int3 [#2]", a "Fatal exception in interrupt") is
// often a consequence of it.
func FirstKernelError(console string) string {
	lines := strings.Split(strings.TrimRight(console, "\n"), "\n")
	first := firstKernelErrorLine(lines)
	if first < 0 {
		return ""
	}
	from := max(0, first-crashBefore)
	var b strings.Builder
	if from > 0 {
		fmt.Fprintf(&b, "[... %d earlier console lines left out ...]\n", from)
	}
	if len(lines)-first <= crashAfter+crashTail {
		b.WriteString(strings.Join(lines[from:], "\n"))
	} else {
		b.WriteString(strings.Join(lines[from:first+crashAfter], "\n"))
		fmt.Fprintf(&b, "\n[... %d console lines left out ...]\n", len(lines)-crashTail-(first+crashAfter))
		b.WriteString(strings.Join(lines[len(lines)-crashTail:], "\n"))
	}
	return b.String()
}

func firstKernelErrorLine(lines []string) int {
	for i, l := range lines {
		if kernelErrorLine.MatchString(strings.TrimRight(l, "\r")) {
			return i
		}
	}
	return -1
}

// KnownCause names the known cause of a guest crash from its console log,
// when its first kernel error has a known signature, or returns "".
//
// The one known: the first error is an unclaimed int3 ("Oops: int3: 0000
// [#1]", the guest's first oops: a later one may follow from any earlier
// error) in a TCG guest. The kernel patches its own text at run time
// (static keys, alternatives: text_poke_bp writes an int3 first, then the
// rest of the instruction, then its first byte, with a sync_core IPI
// between steps, and the int3 handler emulates the instruction while a
// patch is under way); QEMU's multi-threaded TCG before 8.1 can translate
// the patched page on one vCPU while another writes it, so that a vCPU
// still executes the int3 after the patch is done and no handler claims
// it. Fixed in QEMU 8.1 by commit deba78709ae8 ("accel/tcg: Always lock
// pages before translation"); Debian 12's QEMU 7.2 does not have it. A
// single-threaded TCG (LAB_TCG_THREAD=single) or KVM does not hit it. In
// the lab, the usual trigger was the clocksource watchdog marking the TSC
// unstable on a loaded host, which flips the __sched_clock_stable static
// key; test/lab/vm.sh boots TCG guests with tsc=reliable against it
// (docs/linux-interop.md, "QEMU TCG: Oops: int3").
func KnownCause(console, accel string) string {
	lines := strings.Split(strings.TrimRight(console, "\n"), "\n")
	first := firstKernelErrorLine(lines)
	if first < 0 || accel != "tcg" {
		return ""
	}
	// die()'s header may follow a "BUG:"/"WARNING:" line of the same
	// report; look at the first few lines for it.
	for _, l := range lines[first:min(len(lines), first+3)] {
		if tcgInt3.MatchString(strings.TrimRight(l, "\r")) {
			return "the first kernel error is an unclaimed int3 under TCG: the signature of QEMU's multi-threaded TCG " +
				"executing the transient int3 of the kernel's runtime code patching (text_poke_bp) after the patch was done, " +
				"a QEMU bug fixed in QEMU 8.1 (deba78709ae8, \"accel/tcg: Always lock pages before translation\"), not a kernel " +
				"or nvmetd bug; see docs/linux-interop.md, \"QEMU TCG: Oops: int3\""
		}
	}
	return ""
}

// crashReport describes the console of a VM found dead, for an error
// message or the test log: where its whole console log was kept, and the
// first kernel error with its context (or the console's last lines if the
// kernel reported none: qemu killed, or a hang).
func (vm *VM) crashReport() string {
	console := vm.ConsoleLog()
	var b strings.Builder
	if p, err := vm.keepConsole(); err != nil {
		fmt.Fprintf(&b, "(could not keep the console log: %v)\n", err)
	} else {
		fmt.Fprintf(&b, "whole console log kept in %s\n", p)
	}
	if c := KnownCause(console, vm.accel()); c != "" {
		fmt.Fprintf(&b, "KNOWN CAUSE: %s\n", c)
	}
	if ex := FirstKernelError(console); ex != "" {
		b.WriteString("first kernel error on the console, with what came before it:\n")
		b.WriteString(ex)
	} else {
		fmt.Fprintf(&b, "no kernel error on the console; its last %d lines:\n%s", crashTail, tail(console, crashTail))
	}
	return b.String()
}

// accel returns the accelerator vm.sh started the VM with ("kvm", "tcg"),
// or "" if it did not record it.
func (vm *VM) accel() string {
	b, _ := os.ReadFile(filepath.Join(vm.runDir, "accel"))
	return strings.TrimSpace(string(b))
}

// ConsoleDir returns the directory where the console logs of crashed VMs
// are kept: $NVMETD_LAB_CONSOLE_DIR, else TMPDIR/nvmetd-crash-consoles.
func ConsoleDir() string {
	if d := os.Getenv("NVMETD_LAB_CONSOLE_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "nvmetd-crash-consoles")
}

// keepConsole copies the VM's whole console log out of its runtime
// directory (which stop removes) into ConsoleDir, once per VM, and returns
// the copy's path. A later call copies it again (the console may have
// grown) to the same path.
func (vm *VM) keepConsole() (string, error) {
	b, err := os.ReadFile(filepath.Join(vm.runDir, "console.log"))
	if err != nil {
		return "", err
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.keptConsole == "" {
		vm.keptConsole = filepath.Join(ConsoleDir(), fmt.Sprintf("%s-%s-%s-%d.console.log",
			sanitize(vm.name), sanitize(vm.Release()), time.Now().UTC().Format("20060102T150405Z"), os.Getpid()))
	}
	if err := os.MkdirAll(filepath.Dir(vm.keptConsole), 0o755); err != nil {
		return "", err
	}
	return vm.keptConsole, os.WriteFile(vm.keptConsole, b, 0o644)
}
