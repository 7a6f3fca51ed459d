package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/target/configfile"
)

// maxConfigFile bounds the configuration file (target/configfile reads it).
const maxConfigFile = configfile.MaxSize

// readConfigFile reads the configuration file (configfile.Read).
func readConfigFile(path string) ([]byte, error) { return configfile.Read(path) }

// yamlLine matches the line number in a YAML parser error.
var yamlLine = regexp.MustCompile(`yaml: line (\d+): `)

// yamlError explains a YAML syntax error in doc. The parser often names the
// line where the enclosing block began, not the line that broke it; this
// finds the first line after the longest prefix of the document that still
// parses and names it, with its text.
func yamlError(doc []byte, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	lines := bytes.SplitAfter(doc, []byte("\n"))
	if len(lines) > 5000 {
		return err // too long to search; the parser's line stands
	}
	bad := 0
	for k := len(lines) - 1; k >= 0; k-- {
		var v any
		if yaml.Unmarshal(bytes.Join(lines[:k], nil), &v) == nil {
			bad = k + 1
			break
		}
	}
	if bad == 0 || bad > len(lines) {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "While parsing config: ")
	msg = yamlLine.ReplaceAllString(msg, "")
	text := strings.TrimRight(string(lines[bad-1]), "\r\n")
	if strconv.Itoa(bad) == m[1] {
		return fmt.Errorf("line %d: %s: %q", bad, msg, text)
	}
	return fmt.Errorf("line %d: %s (the parser stopped in the block that begins at line %s): %q", bad, msg, m[1], text)
}

// knownEnv lists the NVMETD_* variables nvmetd reads.
func knownEnv() []string {
	env := []string{"NVMETD_CONFIG", "NVMETD_LISTEN", "NVMETD_DEFAULT_SIZE"}
	for _, f := range daemonFlags {
		env = append(env, f.env)
	}
	for _, k := range scalarEnvKeys() {
		env = append(env, envName(k))
	}
	return env
}

// unknownEnv returns a warning for every NVMETD_* variable in environ that
// nvmetd does not read (a misspelling would otherwise be ignored
// silently), with the closest known name. The project's test harness
// variables (NVMETD_LAB_*, NVMETD_INTEROP_*, NVMETD_NO_MAKE) are not
// settings and are left alone.
func unknownEnv(environ []string) []string {
	known := knownEnv()
	var w []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix+"_") || slices.Contains(known, name) ||
			strings.HasPrefix(name, "NVMETD_LAB_") || strings.HasPrefix(name, "NVMETD_INTEROP_") || name == "NVMETD_NO_MAKE" {
			continue
		}
		msg := fmt.Sprintf("environment: %s is not a variable nvmetd reads; it is ignored", name)
		if near := closest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		w = append(w, msg)
	}
	slices.Sort(w)
	return w
}

// closest returns the name of list nearest to s, if it is near (edit
// distance at most 3).
func closest(s string, list []string) string {
	best, bestD := "", 4
	for _, c := range list {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkDaemonFlags checks the values of the daemon flags given on the
// command line, so that a bad one is a usage error naming the flag rather
// than a configuration problem.
func checkDaemonFlags(get func(flag string) (string, bool)) error {
	var problems []string
	if v, ok := get("log-level"); ok {
		if _, err := zapcore.ParseLevel(v); err != nil || v == "" {
			problems = append(problems, fmt.Sprintf("--log-level: %q is not one of debug, info, warn, error", v))
		}
	}
	if v, ok := get("log-format"); ok && !slices.Contains([]string{"auto", "console", "json"}, v) {
		problems = append(problems, fmt.Sprintf("--log-format: %q is not one of auto, console, json", v))
	}
	if v, ok := get("shutdown-timeout"); ok {
		if d, err := time.ParseDuration(v); err == nil && d <= 0 {
			problems = append(problems, fmt.Sprintf("--shutdown-timeout: %s is not positive", v))
		}
	}
	if v, ok := get("health-log-interval"); ok {
		if d, err := time.ParseDuration(v); err == nil && d < time.Minute {
			problems = append(problems, fmt.Sprintf("--health-log-interval: %s is below 1m", v))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
