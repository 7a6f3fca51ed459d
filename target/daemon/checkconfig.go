package daemon

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/target"
)

// checkResult is --check-config -o json.
type checkResult struct {
	Valid bool `json:"valid"`
	// File is the configuration file; "" for the built-in default.
	File     string         `json:"file"`
	Problems []checkProblem `json:"problems"`
	Warnings []string       `json:"warnings"`
	// Effective is the effective configuration (as the normal output's
	// YAML), when valid.
	Effective map[string]any `json:"effective,omitempty"`
}

// checkProblem is one problem: the field (configuration key, flag or
// variable) and what is wrong.
type checkProblem struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// runCheckConfig is --check-config: load and validate the configuration,
// check what it opens (target.Config.Check: paths, device types, sizes,
// memory), print the effective configuration. It returns the exit code.
func runCheckConfig(o *options, fs *pflag.FlagSet, stdout, stderr io.Writer) int {
	res := checkResult{Problems: []checkProblem{}, Warnings: []string{}}
	lc, err := loadConfig(o, fs, false)
	if err == nil && lc.Gateway != nil && !gateway.Built {
		// Valid, but this build would refuse to run it (exit 78).
		err = gateway.ErrRADOSNotBuilt
	}
	if err == nil {
		res.File = lc.File
		res.Warnings = append(res.Warnings, lc.Warnings...)
		if cerr := checkTarget(lc); cerr != nil {
			where := "configuration"
			if lc.File != "" {
				where = "config file " + lc.File
			}
			err = fmt.Errorf("%s:\n%w", where, cerr)
		}
	} else if f, ferr := resolveConfigFile(o); ferr == nil {
		res.File = f
	}
	var eff bytes.Buffer
	if err == nil {
		err = writeEffective(&eff, lc)
	}
	res.Valid = err == nil
	if err != nil {
		res.Problems = problemsOf(err)
	}
	if o.output == "json" {
		if res.Valid {
			var m map[string]any
			if yerr := yaml.Unmarshal(eff.Bytes(), &m); yerr == nil {
				res.Effective = m
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else if res.Valid {
		_, _ = stdout.Write(eff.Bytes())
	}
	if err != nil {
		if o.output != "json" {
			fmt.Fprintf(stderr, "nvmetd: %s\n", indent(err.Error()))
		}
		return exitFailure
	}
	if o.output != "json" {
		for _, w := range res.Warnings {
			fmt.Fprintf(stderr, "nvmetd: warning: %s\n", w)
		}
		fmt.Fprintf(stderr, "nvmetd: the configuration is valid\n")
	}
	return exitOK
}

// checkTarget runs target.Config.Check. The built-in default's host key
// is generated at the first start: until then it is checked as if it
// existed (a generated key, in memory only).
func checkTarget(lc *loadedConfig) error {
	cfg := lc.Target
	if lc.DefaultHostKey != "" {
		if _, err := os.Lstat(lc.DefaultHostKey); errors.Is(err, os.ErrNotExist) {
			key, err := auth.GenerateKey(auth.KeyOptions{NQN: lc.DefaultHostNQN}, rand.Reader)
			if err != nil {
				return err
			}
			c := *cfg
			c.Hosts = slices.Clone(cfg.Hosts)
			for i := range c.Hosts {
				if c.Hosts[i].DHCHAPKey == dhchapkey.FilePrefix+lc.DefaultHostKey {
					c.Hosts[i].DHCHAPKey = key
				}
			}
			cfg = &c
		}
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	// What the daemon refuses at start: a password file others may read
	// or that another user owns (metricserve.ReadPasswordFile).
	if f := cfg.Metrics.BasicAuthPasswordFile; f != "" && cfg.Metrics.Enabled() {
		if _, err := metricserve.ReadPasswordFile(f); err != nil {
			return &target.ValidationError{Problems: []*target.FieldError{{Field: "metrics.basic_auth_password_file", Reason: err.Error(), Err: err}}}
		}
	}
	return nil
}

// problemsOf turns a loading error into problems: a target
// *ValidationError's problems as they are, other errors one per line
// ("field: reason") after the heading line that names the file.
func problemsOf(err error) []checkProblem {
	var ve *target.ValidationError
	if errors.As(err, &ve) {
		var out []checkProblem
		for _, p := range ve.Problems {
			out = append(out, checkProblem{Field: p.Field, Reason: p.Reason})
		}
		return out
	}
	var out []checkProblem
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || (i == 0 && len(lines) > 1 && strings.HasSuffix(l, ":")) {
			continue
		}
		field, reason, ok := strings.Cut(l, ": ")
		if !ok || strings.Contains(field, " ") && !strings.HasPrefix(field, "config file") {
			field, reason = "", l
		}
		out = append(out, checkProblem{Field: field, Reason: reason})
	}
	return out
}
