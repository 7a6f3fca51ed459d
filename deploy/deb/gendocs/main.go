// Command gendocs writes the man pages and the bash and zsh completions of
// nvmetd, nvmeof and iwping from the programs' own command and flag
// definitions: it runs each built binary's --help (and each subcommand's),
// whose flag lists pflag prints from the definitions, and turns them into
// troff and completion scripts. make deb runs it; nothing is written by
// hand, so a new flag or subcommand (one file per nvmeof command) appears
// in the man page and the completions of the next build.
//
//	go run ./deploy/deb/gendocs -out DIR -version V BIN_DIR
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// flagDef is one flag as --help lists it.
type flagDef struct {
	short, long, arg, help string
}

// command is a program or one of its subcommands.
type command struct {
	name, summary string
	flags         []flagDef
}

// program is what a man page and a completion describe.
type program struct {
	name, section, title, description string
	synopsis                          []string
	top                               command
	subs                              []command
	// bin is set for a cobra program, which writes its completions.
	bin string
}

var flagLine = regexp.MustCompile(`^\s+(?:-(\S), )?--([A-Za-z0-9][\w-]*)(?: (\S+))?\s{2,}(.*)$`)
var cmdLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]+)\s{2,}(.+)$`)

// helpOf runs bin with args and returns stdout and stderr together.
func helpOf(bin string, args ...string) string {
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // --help may exit non-zero
	return out.String()
}

// parseFlags reads pflag's flag usage lines.
func parseFlags(help string) []flagDef {
	var fs []flagDef
	for _, l := range strings.Split(help, "\n") {
		m := flagLine.FindStringSubmatch(l)
		if m == nil {
			// A continuation of the previous flag's help.
			if t := strings.TrimSpace(l); t != "" && len(fs) > 0 && strings.HasPrefix(l, strings.Repeat(" ", 20)) {
				fs[len(fs)-1].help += " " + t
			}
			continue
		}
		if m[2] == "help" {
			continue
		}
		fs = append(fs, flagDef{short: m[1], long: m[2], arg: m[3], help: strings.TrimSpace(m[4])})
	}
	return fs
}

func main() {
	out := flag.String("out", "docs", "output directory")
	ver := flag.String("version", "dev", "version for the man page footers")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gendocs -out DIR -version V BIN_DIR")
		os.Exit(2)
	}
	bin := flag.Arg(0)
	progs := []program{nvmetd(filepath.Join(bin, "nvmetd")), nvmetctl(filepath.Join(bin, "nvmetctl")), nvmeof(filepath.Join(bin, "nvmeof")), iwping(filepath.Join(bin, "iwping"))}
	for _, d := range []string{"man", "bash-completion", "zsh"} {
		if err := os.MkdirAll(filepath.Join(*out, d), 0o755); err != nil {
			die(err)
		}
	}
	for _, p := range progs {
		write(filepath.Join(*out, "man", p.name+"."+p.section), manPage(p, *ver))
		if p.bin != "" {
			// A cobra program writes its own completions (they know
			// the nested commands).
			write(filepath.Join(*out, "bash-completion", p.name), helpOf(p.bin, "completion", "bash"))
			write(filepath.Join(*out, "zsh", "_"+p.name), helpOf(p.bin, "completion", "zsh"))
			continue
		}
		write(filepath.Join(*out, "bash-completion", p.name), bashCompletion(p))
		write(filepath.Join(*out, "zsh", "_"+p.name), zshCompletion(p))
	}
}

func write(path, s string) {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		die(err)
	}
}

func die(err error) {
	fmt.Fprintln(os.Stderr, "gendocs:", err)
	os.Exit(1)
}

func nvmetd(bin string) program {
	return program{
		name: "nvmetd", section: "8", title: "NVMe over Fabrics target (NVMe/RDMA over a user-space iWARP engine on TCP)",
		description: "nvmetd exports files, block devices and memory as NVMe namespaces over NVMe-oF with the RDMA transport. " +
			"The RDMA is nvmetd's own iWARP engine (RFC 5040/5041/5044/6581) over ordinary TCP: no RDMA NIC and no kernel module are needed, " +
			"and traffic is routed like any TCP. Linux hosts connect with nvme connect -t rdma over soft-iWARP (siw); hosts without it use nvmeof(8). " +
			"The configuration is /etc/nvmetd/nvmetd.yaml (every setting commented); NVMETD_* variables and flags override it. " +
			"SIGHUP or nvmetd reload (systemctl reload) reloads it: everything is checked and every new or changed namespace opened before anything live changes, or nothing changes; " +
			"nvmetd reload waits for the verdict and exits 1 when the reload is refused. " +
			"SIGTERM drains in-flight I/O, flushes and exits. Exit status: 0, 1 failure (--check-config: invalid), 2 usage, 78 invalid configuration; " +
			"nvmetd status exits 3 when the daemon is degraded (a namespace failed to open, a port down, the last reload refused).",
		synopsis: []string{"nvmetd [--config FILE] [flags]", "nvmetd --check-config [-o normal|json]", "nvmetd status [-o normal|json] [--health-report]",
			"nvmetd reload", "nvmetd trace start|stop|status [flags]"},
		top: command{name: "nvmetd", flags: parseFlags(helpOf(bin, "--help"))},
		subs: []command{
			{name: "status", summary: "show the running daemon's status", flags: parseFlags(helpOf(bin, "status", "--help"))},
			{name: "reload", summary: "reload the running daemon's configuration and wait for the verdict", flags: parseFlags(helpOf(bin, "reload", "--help"))},
			{name: "trace", summary: "start, stop or show a wire trace (pcap) of selected queues: trace start --host NQN | --address IP | --controller SUBNQN:CNTLID[:QID] -w FILE",
				flags: parseFlags(helpOf(bin, "trace", "--help"))},
		},
	}
}

func nvmeof(bin string) program {
	p := program{
		name: "nvmeof", section: "8", title: "NVMe over Fabrics host tool for nvmetd's user-space NVMe/RDMA (iWARP over TCP)",
		description: "nvmeof connects to NVMe-oF subsystems over NVMe/RDMA with nvmetd's user-space iWARP engine, in the shape of nvme-cli's fabrics commands. " +
			"Each connection is a small daemon that exposes the namespaces as files through FUSE; --mount attaches a loop device and mounts the filesystem " +
			"(--mkfs makes one first: it erases the namespace). A namespace is attached once per host; bench refuses a namespace in use unless --force; " +
			"disconnect --force always finishes. Exit status: 0, 1 failure, 2 usage.",
		synopsis: []string{"nvmeof COMMAND [flags]", "nvmeof --version"},
		top:      command{name: "nvmeof"},
	}
	for _, l := range strings.Split(helpOf(bin, "--help"), "\n") {
		if m := cmdLine.FindStringSubmatch(l); m != nil {
			p.subs = append(p.subs, command{name: m[1], summary: m[2], flags: parseFlags(helpOf(bin, m[1], "--help"))})
		}
	}
	return p
}

func nvmetctl(bin string) program {
	p := program{
		name: "nvmetctl", section: "8", title: "manage a running nvmetd: ports, subsystems, namespaces, hosts, ANA states, statistics",
		description: "nvmetctl talks to nvmetd's control socket (the management API of docs/api.yaml) in the vocabulary of nvmetcli (ls, save, restore, clear) " +
			"and SPDK's rpc.py (whose method names work as commands: nvmf_get_stats, nvmf_create_subsystem, nvmf_subsystem_add_ns, ...). " +
			"Every change is applied as a reload of the configuration file would apply it (the same validation, the same notices to connected hosts) " +
			"or refused naming the field, changing nothing. Changes stay in memory until saved (--persist, or nvmetctl save); a SIGHUP re-reads the file. " +
			"restore imports nvmetcli's config.json and export writes it; what cannot be mapped is named in an error. Exit status: 0, 1 failure, 2 usage.",
		synopsis: []string{"nvmetctl COMMAND [SUBCOMMAND] [ARGS] [--persist] [-o normal|json] [--socket PATH]", "nvmetctl --version"},
		top:      command{name: "nvmetctl", flags: parseFlags(helpOf(bin, "--help"))},
		bin:      bin,
	}
	for _, l := range strings.Split(helpOf(bin, "--help"), "\n") {
		m := cmdLine.FindStringSubmatch(l)
		if m == nil || m[1] == "help" || m[1] == "completion" {
			continue
		}
		sub := helpOf(bin, m[1], "--help")
		p.subs = append(p.subs, command{name: m[1], summary: m[2], flags: localFlags(sub)})
		for _, s := range strings.Split(sub, "\n") {
			if sm := cmdLine.FindStringSubmatch(s); sm != nil {
				p.subs = append(p.subs, command{name: m[1] + " " + sm[1], summary: sm[2], flags: localFlags(helpOf(bin, m[1], sm[1], "--help"))})
			}
		}
	}
	return p
}

// localFlags reads the flags of a cobra command's help, without the
// global flags listed after them.
func localFlags(help string) []flagDef {
	help, _, _ = strings.Cut(help, "Global Flags:")
	return parseFlags(help)
}

func iwping(bin string) program {
	return program{
		name: "iwping", section: "1", title: "rping-compatible check of nvmetd's user-space iWARP engine",
		description: "iwping speaks librdmacm rping's exchange (Send, RDMA Read, RDMA Write, validation) over nvmetd's iWARP engine on TCP, " +
			"so it interoperates with rping over Linux soft-iWARP (siw) both ways.",
		synopsis: []string{"iwping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]", "iwping -c [-vVd] [-S size] [-C count] -a addr [-p port]"},
		top:      command{name: "iwping", flags: parseFlags(helpOf(bin, "--help"))},
	}
}

// troff escapes text for a man page.
func troff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func flagsTroff(b *strings.Builder, fs []flagDef) {
	for _, f := range fs {
		b.WriteString(".TP\n")
		name := `\fB\-\-` + troff(f.long) + `\fR`
		if f.short != "" {
			name = `\fB\-` + troff(f.short) + `\fR, ` + name
		}
		if f.arg != "" {
			name += ` \fI` + troff(f.arg) + `\fR`
		}
		b.WriteString(name + "\n" + troff(f.help) + "\n")
	}
}

func manPage(p program, ver string) string {
	var b strings.Builder
	date := time.Now().UTC().Format("2006-01-02")
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		fmt.Sscan(s, &sec)
		date = time.Unix(sec, 0).UTC().Format("2006-01-02")
	}
	fmt.Fprintf(&b, ".\\\" Generated by deploy/deb/gendocs from %s --help; do not edit.\n", p.name)
	fmt.Fprintf(&b, ".TH %s %s %s \"nvmetd %s\" \"nvmetd\"\n", strings.ToUpper(p.name), p.section, date, troff(ver))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n.SH SYNOPSIS\n", p.name, troff(p.title))
	for i, s := range p.synopsis {
		if i > 0 {
			b.WriteString(".br\n")
		}
		b.WriteString(troff(s) + "\n")
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", troff(p.description))
	if len(p.top.flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		flagsTroff(&b, p.top.flags)
	}
	if len(p.subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, c := range p.subs {
			fmt.Fprintf(&b, ".SS %s\n", troff(p.name+" "+c.name))
			if c.summary != "" {
				b.WriteString(troff(c.summary) + "\n")
			}
			flagsTroff(&b, c.flags)
		}
	}
	b.WriteString(".SH SEE ALSO\n")
	var see []string
	for _, o := range []string{"nvmetd(8)", "nvmetctl(8)", "nvmeof(8)", "iwping(1)", "nvme(1)", "rping(1)"} {
		if !strings.HasPrefix(o, p.name+"(") {
			see = append(see, `\fB`+strings.Replace(o, "(", `\fR(`, 1))
		}
	}
	b.WriteString(strings.Join(see, ", ") + "\n")
	return b.String()
}

// words returns the --long (and -s) names of fs.
func words(fs []flagDef) []string {
	var w []string
	for _, f := range fs {
		w = append(w, "--"+f.long)
		if f.short != "" {
			w = append(w, "-"+f.short)
		}
	}
	sort.Strings(w)
	return w
}

func bashCompletion(p program) string {
	var b strings.Builder
	fn := "_" + strings.ReplaceAll(p.name, "-", "_")
	fmt.Fprintf(&b, "# bash completion for %s; generated by deploy/deb/gendocs from %s --help.\n", p.name, p.name)
	fmt.Fprintf(&b, "%s() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]}\n", fn)
	if len(p.subs) == 0 {
		fmt.Fprintf(&b, "\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n}\n", strings.Join(words(p.top.flags), " "))
	} else {
		var names []string
		for _, c := range p.subs {
			names = append(names, c.name)
		}
		top := append(names, words(p.top.flags)...)
		fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(top, " "))
		b.WriteString("\tcase ${COMP_WORDS[1]} in\n")
		for _, c := range p.subs {
			fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.name, strings.Join(words(c.flags), " "))
		}
		fmt.Fprintf(&b, "\t*) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n\tesac\n}\n", strings.Join(words(p.top.flags), " "))
	}
	fmt.Fprintf(&b, "complete -o default -F %s %s\n", fn, p.name)
	return b.String()
}

func zshCompletion(p program) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %s\n# zsh completion for %s; generated by deploy/deb/gendocs from %s --help.\n", p.name, p.name, p.name)
	fmt.Fprintf(&b, "_%s() {\n", p.name)
	spec := func(fs []flagDef) string {
		var parts []string
		for _, f := range fs {
			h := strings.NewReplacer("[", `\[`, "]", `\]`, "'", "", ":", `\:`).Replace(f.help)
			arg := ""
			if f.arg != "" {
				arg = ":" + f.arg + ":_files"
			}
			parts = append(parts, fmt.Sprintf("'--%s[%s]%s'", f.long, h, arg))
			if f.short != "" {
				parts = append(parts, fmt.Sprintf("'-%s[%s]%s'", f.short, h, arg))
			}
		}
		return strings.Join(parts, " \\\n\t\t")
	}
	if len(p.subs) == 0 {
		fmt.Fprintf(&b, "\t_arguments -s \\\n\t\t%s\n}\n", spec(p.top.flags))
	} else {
		b.WriteString("\tlocal -a cmds\n\tcmds=(\n")
		for _, c := range p.subs {
			fmt.Fprintf(&b, "\t\t'%s:%s'\n", c.name, strings.ReplaceAll(strings.ReplaceAll(c.summary, "'", ""), ":", `\:`))
		}
		b.WriteString("\t)\n\tif (( CURRENT == 2 )); then\n\t\t_describe command cmds\n\t\treturn\n\tfi\n\tcase $words[2] in\n")
		for _, c := range p.subs {
			if len(c.flags) == 0 {
				fmt.Fprintf(&b, "\t%s) ;;\n", c.name)
				continue
			}
			fmt.Fprintf(&b, "\t%s) _arguments -s \\\n\t\t%s ;;\n", c.name, spec(c.flags))
		}
		b.WriteString("\tesac\n}\n")
	}
	fmt.Fprintf(&b, "_%s \"$@\"\n", p.name)
	return b.String()
}
