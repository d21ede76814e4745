package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

// TestHelpGrouped: --help lists every flag once, on one line, under its
// section, with what it means and its default.
func TestHelpGrouped(t *testing.T) {
	var b strings.Builder
	writeHelp(&b)
	help := b.String()
	at := -1
	for _, title := range groupTitles {
		i := strings.Index(help, "\n"+title+":\n")
		if i < at {
			t.Fatalf("section %q missing or out of order in\n%s", title, help)
		}
		at = i
	}
	section := func(name string) string {
		i := strings.Index(help, "\n  --"+name+" ")
		if i < 0 {
			return ""
		}
		title := help[strings.LastIndex(help[:i], "\n\n")+2:]
		return title[:strings.Index(title, ":")]
	}
	fs := newFlagSet(&config{}, new(string))
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(help, "\n  --"+f.Name+" "); n != 1 {
			t.Errorf("--%s is listed %d times", f.Name, n)
		}
		if got, want := section(f.Name), groupTitles[fs.group[f.Name]]; got != want {
			t.Errorf("--%s is under %q, want %q", f.Name, got, want)
		}
	})
	for _, want := range []string{
		"--listen string", "HTTP listen address (default :8080)", "--ttl duration", "(default 1d)",
		"--nats string", "(default: unset)", "--upstream-idempotency ", "(default false)", "REPRISE_<NAME>", "1d12h",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for line := range strings.Lines(help) {
		if strings.HasPrefix(line, "  --") && !strings.Contains(line, "(default") {
			t.Errorf("no default on %q", line)
		}
	}
	for name, want := range map[string]string{"listen": "Server", "upstream": "Upstream", "nats": "Storage", "max-body": "Limits", "auth": "Auth", "log-level": "Observability"} {
		if got := section(name); got != want {
			t.Errorf("--%s under %q, want %q", name, got, want)
		}
	}
}

// TestFlagWithoutSection: a flag defined without fs.in(group) is refused
// where the flag set is built, naming it.
func TestFlagWithoutSection(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "--nosection") {
			t.Errorf("panic %v, want one naming --nosection", r)
		}
	}()
	fs := newFlags()
	fs.in(groupServer).String("fine", "", "")
	fs.String("nosection", "", "")
	fs.claim()
}

// TestUnknownFlag: a mistyped flag answers in two lines, the second naming
// the flag meant when one is near.
func TestUnknownFlag(t *testing.T) {
	for _, tc := range []struct{ arg, nearest string }{
		{"--lisen", "listen"},
		{"-upstream-keys=x", "upstream-key"},
		{"--retry-atempts", "retry-attempts"},
		{"--max-reader-per-key", "max-readers-per-key"},
		{"--zzzzzzzzzzzz", ""},
	} {
		_, err := parseConfig([]string{"--listen", ":1", tc.arg, "1"}, noEnv)
		var u *unknownFlagError
		if !errors.As(err, &u) {
			t.Fatalf("%s: %v, want an unknown flag", tc.arg, err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 2 || u.nearest != tc.nearest || tc.nearest != "" && !strings.Contains(lines[1], "--"+tc.nearest+"?") {
			t.Errorf("%s: %q, want two lines naming %q", tc.arg, err, tc.nearest)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"--listen", ":1", "-help"}} {
		if _, err := parseConfig(args, noEnv); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want flag.ErrHelp", args, err)
		}
	}
}

// TestDurationUnits: durations take days and weeks, from a flag, a
// variable or the file; a wrong one says which units there are.
func TestDurationUnits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "reprise.conf")
	if err := os.WriteFile(file, []byte("ttl = 1w\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		get  func(config) time.Duration
		want time.Duration
	}{
		{[]string{"--ttl", "1d"}, nil, func(c config) time.Duration { return c.p.Journal.TTL }, 24 * time.Hour},
		{[]string{"--ttl=1d12h"}, nil, func(c config) time.Duration { return c.p.Journal.TTL }, 36 * time.Hour},
		{[]string{"--grace", "90s"}, nil, func(c config) time.Duration { return c.grace }, 90 * time.Second},
		{[]string{"--lease", "1.5s"}, nil, func(c config) time.Duration { return c.p.Lease }, 1500 * time.Millisecond},
		{[]string{"--cancel-unread", "0"}, nil, func(c config) time.Duration { return c.p.Limits.CancelUnread }, 0},
		{nil, map[string]string{"REPRISE_TTL": "2d"}, func(c config) time.Duration { return c.p.Journal.TTL }, 48 * time.Hour},
		{[]string{"--config", file}, nil, func(c config) time.Duration { return c.p.Journal.TTL }, 7 * 24 * time.Hour},
	} {
		c, err := parseConfig(tc.args, func(k string) string { return tc.env[k] })
		if err != nil || tc.get(c) != tc.want {
			t.Errorf("%q %v: %v, %v; want %v", tc.args, tc.env, tc.get(c), err, tc.want)
		}
	}
	for _, bad := range []string{"5x", "90", "1 d", ""} {
		_, err := parseConfig([]string{"--ttl", bad}, noEnv)
		if !errors.Is(err, errDuration) || !strings.Contains(err.Error(), "--ttl") || !strings.Contains(err.Error(), "1d") {
			t.Errorf("--ttl %q: %v, want the units", bad, err)
		}
	}
	if _, err := parseConfig(nil, func(k string) string { return map[string]string{"REPRISE_GRACE": "soon"}[k] }); !errors.Is(err, errDuration) || !strings.Contains(err.Error(), "REPRISE_GRACE") {
		t.Errorf("REPRISE_GRACE=soon: %v", err)
	}
}

// TestUnknownEnv: a REPRISE_* variable that names no flag is found, with
// the one it probably meant; the flags' own and the ones read otherwise
// are not.
func TestUnknownEnv(t *testing.T) {
	got := unknownEnv([]string{
		"PATH=/bin", "REPRISE_LISTEN=:1", "REPRISE_CONFIG=/etc/r", "REPRISE_LISTN=:2",
		"REPRISE_OPENAI_KEY=sk", "REPRISE_UPSTREAM_KEY=sk", "REPRISE_COMPLETELY_ELSE=1",
	}, "REPRISE_OPENAI_KEY")
	want := []unknownVar{{"REPRISE_LISTN", "REPRISE_LISTEN"}, {"REPRISE_COMPLETELY_ELSE", ""}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("unknownEnv = %+v, want %+v", got, want)
	}
}

// TestParseArgs: the forms a flag may take, and what is refused.
func TestParseArgs(t *testing.T) {
	c, err := parseConfig([]string{"-listen", ":1", "--upstream=http://u:1", "--upstream-idempotency", "--tenant-header", "-3", "--"}, noEnv)
	if err != nil || c.listen != ":1" || c.upstream != "http://u:1" || !c.p.UpstreamIdempotency || c.p.Auth.TenantHeader != "-3" {
		t.Errorf("%+v, %v", c, err)
	}
	for _, bad := range [][]string{{"extra"}, {"--", "extra"}, {"---listen", ":1"}, {"-=x"}, {"--listen"}, {"--upstream-idempotency=maybe"}, {"-"}} {
		if _, err := parseConfig(bad, noEnv); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want an error", bad, err)
		}
	}
}

// FuzzParseArgs: parseArgs accepts what the flag package accepts (with no
// argument left over) and sets the same values.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"--listen\x00:1", "-ttl=1d\x00--grace\x0090s", "--upstream-idempotency\x00--replicas\x003",
		"--upstream-idempotency=false", "--\x00x", "-h", "--lisen", "---x", "-=", "--ttl", "--log-format\x00text",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		mine := newFlagSet(&config{}, new(string))
		theirs := newFlagSet(&config{}, new(string))
		errMine := parseArgs(mine, args)
		errTheirs := theirs.Parse(args)
		okTheirs := errTheirs == nil && theirs.NArg() == 0
		if (errMine == nil) != okTheirs || errors.Is(errMine, flag.ErrHelp) != errors.Is(errTheirs, flag.ErrHelp) {
			t.Fatalf("%q: parseArgs %v, flag.Parse %v (args left %d)", args, errMine, errTheirs, theirs.NArg())
		}
		if errMine != nil {
			return
		}
		theirs.VisitAll(func(fl *flag.Flag) {
			if a, b := mine.Lookup(fl.Name).Value.String(), fl.Value.String(); a != b {
				t.Errorf("%q: --%s = %q, flag.Parse %q", args, fl.Name, a, b)
			}
		})
	})
}

// TestConfigFileUnknownSetting: a mistyped setting in --config names the
// one meant.
func TestConfigFileUnknownSetting(t *testing.T) {
	file := filepath.Join(t.TempDir(), "reprise.conf")
	if err := os.WriteFile(file, []byte("lisen = :1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseConfig([]string{"--config", file}, noEnv); err == nil || !strings.Contains(err.Error(), `unknown setting "lisen"; did you mean "listen"?`) {
		t.Errorf("%v, want the nearest setting named", err)
	}
}

// TestFlagsDocumented: every flag has a row in the README's tables or in
// docs/retries.md's (the call policy's), where its meaning and default are
// written down.
func TestFlagsDocumented(t *testing.T) {
	var docs strings.Builder
	for _, f := range []string{"../../README.md", "../../docs/retries.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	var rows []string
	for line := range strings.Lines(docs.String()) {
		if strings.HasPrefix(line, "| `--") {
			rows = append(rows, line[:strings.Index(line[1:], "|")+1]) // the first cell: the flags it is about
		}
	}
	newFlagSet(&config{}, new(string)).VisitAll(func(f *flag.Flag) {
		for _, r := range rows {
			if strings.Contains(r, "`--"+f.Name+"`") || strings.Contains(r, "`--"+f.Name+" ") {
				return
			}
		}
		t.Errorf("--%s has no row in README.md or docs/retries.md", f.Name)
	})
}
