package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnumValuesListed: a value a word flag does not take is refused
// naming the flag, the value and every value it takes — from the command
// line, a variable or the config file.
func TestEnumValuesListed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "reprise.conf")
	for _, tc := range []struct{ name, bad, valid string }{
		{"log-level", "verbose", "debug, info, warn or error"},
		{"log-format", "xml", "json or text"},
		{"auth", "open", "passthrough, static or none"},
	} {
		_, err := parseConfig([]string{"--" + tc.name, tc.bad}, noEnv)
		if want := "--" + tc.name + ` "` + tc.bad + `": want ` + tc.valid; err == nil || err.Error() != want {
			t.Errorf("--%s %s: %v, want %q", tc.name, tc.bad, err, want)
		}
		env := envName(tc.name)
		_, err = parseConfig(nil, func(k string) string { return map[string]string{env: tc.bad}[k] })
		if err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "--"+tc.name) || !strings.Contains(err.Error(), tc.valid) {
			t.Errorf("%s=%s: %v, want the variable, the flag and %q", env, tc.bad, err, tc.valid)
		}
		if err := os.WriteFile(file, []byte(tc.name+" = "+tc.bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = parseConfig([]string{"--config", file}, noEnv)
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.valid) {
			t.Errorf("%s in the file: %v, want the file, the setting and %q", tc.name, err, tc.valid)
		}
	}
	// What slog knows beyond the four names still goes.
	if c, err := parseConfig([]string{"--log-level", "WARN+2"}, noEnv); err != nil || c.logLevel.String() != "WARN+2" {
		t.Errorf("--log-level WARN+2: %v, %v", c.logLevel, err)
	}
}

// TestNumbersNameTheirFlag: every numeric flag (a count, a size, a
// duration, a share) refuses what is no number, and any value out of its
// range, naming the flag and what it takes — never a message that leaves
// the reader to guess which flag ("limits must be positive").
func TestNumbersNameTheirFlag(t *testing.T) {
	fs := newFlagSet(&config{}, new(string))
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || strings.HasPrefix(f.Usage, "the former name of") {
			return // --cors-origins: a list; an old name is told by its new one
		}
		var out []string // values out of any range
		switch g.Get().(type) {
		case int, int64, uint, uint64:
			out = []string{"-1", "0", "1000000000000"}
		case float64:
			out = []string{"-1", "2", "NaN"}
		case time.Duration:
			out = []string{"-1s", "0", "1ns", "10000d"}
		default:
			return
		}
		for _, v := range append([]string{"many"}, out...) {
			_, err := parseConfig([]string{"--" + f.Name, v}, noEnv)
			if err == nil && v != "many" {
				continue // in its range
			}
			// The flag, or the one its value conflicts with, naming it.
			if msg := err.Error(); !strings.Contains(msg, "--"+f.Name) || !strings.Contains(msg, "want") && !strings.Contains(msg, "must") && !strings.Contains(msg, "needs") {
				t.Errorf("--%s %s: %q, want the flag and what it takes", f.Name, v, msg)
			}
		}
		env := envName(f.Name)
		_, err := parseConfig(nil, func(k string) string { return map[string]string{env: "many"}[k] })
		if err == nil || !strings.HasPrefix(err.Error(), env) || !strings.Contains(err.Error(), "(--"+f.Name+")") {
			t.Errorf("%s=many: %v, want the variable and the flag", env, err)
		}
	})
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-body", "-1"}, nil, "--max-body -1: must be at least 1 (bytes)"},
		{nil, map[string]string{"REPRISE_MAX_BODY": "-1"}, "--max-body -1 (from REPRISE_MAX_BODY): must be at least 1 (bytes)"},
		{[]string{"--replicas", "9"}, nil, "--replicas 9: must be 1 to 5"},
		{[]string{"--retry-attempts", "50"}, nil, "--retry-attempts 50: must be 1 to 10 (1: no retries)"},
		{[]string{"--retry-budget", "1.5"}, nil, "--retry-budget 1.5: must be 0 to 1 (a share of the calls)"},
		{[]string{"--idle-timeout", "0"}, nil, "--idle-timeout 0s: must be more than 0"},
		{[]string{"--breaker-failures", "-1"}, nil, `--breaker-failures "-1": want a whole number, 0 or more`},
		{[]string{"--max-readers-per-key", "lots"}, nil, `--max-readers-per-key "lots": want a whole number`},
		{[]string{"--secret", "short"}, nil, "--secret: must be at least 16 characters"},
		{[]string{"--daily-budget", "5"}, nil, "the cost guard (--cost-guard-ratio, --daily-budget) needs --prices FILE"},
	} {
		_, err := parseConfig(tc.args, func(k string) string { return tc.env[k] })
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q %v: %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}
