package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agnivade/levenshtein"
	"github.com/xhit/go-str2duration/v2"
)

// group is a section of --help. Every flag is in one: it is defined as
// fs.in(group).XxxVar(…), so a new flag names its section where it is
// defined, and newFlagSet panics on one that does not.
type group int

// The sections of --help, in their order.
const (
	groupServer group = iota
	groupUpstream
	groupStorage
	groupLimits
	groupAuth
	groupObservability
	groupCount
)

var groupTitles = [groupCount]string{"Server", "Upstream", "Storage", "Limits", "Auth", "Observability"}

// flags is the command's flag set and each flag's --help section. Its
// DurationVar reads durations with days and weeks (durationValue).
type flags struct {
	*flag.FlagSet
	group   map[string]group
	pending *group
}

func newFlags() *flags {
	fs := flag.NewFlagSet("reprise", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs and writeHelp say what is wrong
	return &flags{FlagSet: fs, group: map[string]group{}}
}

// in returns f for defining one flag in section g.
func (f *flags) in(g group) *flags {
	f.claim()
	f.pending = &g
	return f
}

// claim gives the flag defined since the last in its section.
func (f *flags) claim() {
	var fresh []string
	f.VisitAll(func(fl *flag.Flag) {
		if _, ok := f.group[fl.Name]; !ok {
			fresh = append(fresh, fl.Name)
		}
	})
	if len(fresh) > 1 || len(fresh) == 1 && f.pending == nil {
		panic(fmt.Sprintf("flag --%s has no --help section: define it as fs.in(groupX).XxxVar(…)", fresh[len(fresh)-1]))
	}
	if len(fresh) == 1 {
		f.group[fresh[0]] = *f.pending
	}
	f.pending = nil
}

// DurationVar defines a duration flag that also takes days and weeks.
func (f *flags) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*durationValue)(p), name, usage)
}

// durationValue is a duration as people type it: Go's units and d (24h)
// and w (7d), combined as in 1d12h.
type durationValue time.Duration

// errDuration is what a value that is no duration gets.
var errDuration = errors.New("want a duration such as 90s, 5m, 1h30m or 1d (units ns, us, ms, s, m, h, d, w)")

func (d *durationValue) Set(s string) error {
	v, err := str2duration.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errDuration
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return str2duration.String(time.Duration(*d)) }

func (d *durationValue) Get() any { return time.Duration(*d) }

// choiceValue is a flag whose value is one of a few words; a value that is
// none of them is refused with the list. The --help line shows it as a
// string.
type choiceValue struct {
	v       *string
	choices []string
}

func newChoice(p *string, value string, choices ...string) *choiceValue {
	*p = value
	return &choiceValue{p, choices}
}

func (c *choiceValue) Set(s string) error {
	if !slices.Contains(c.choices, s) {
		return fmt.Errorf("want %s", orList(c.choices))
	}
	*c.v = s
	return nil
}

func (c *choiceValue) String() string {
	if c == nil || c.v == nil {
		return ""
	}
	return *c.v
}

func (c *choiceValue) Get() any { return *c.v }

// levelValue is --log-level: the names slog knows (debug, info, warn,
// error, with an offset such as warn+2 for the curious), refused with the
// list otherwise.
type levelValue slog.Level

func (l *levelValue) Set(s string) error {
	var v slog.Level
	if err := v.UnmarshalText([]byte(s)); err != nil {
		return errors.New("want debug, info, warn or error")
	}
	*l = levelValue(v)
	return nil
}

func (l *levelValue) String() string { return strings.ToLower(slog.Level(*l).String()) }

func (l *levelValue) Get() any { return slog.Level(*l) }

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// set sets flag name to value, and says what a value it refuses should be
// when the flag's own error does not (the flag package's numbers say
// only "parse error").
func (f *flags) set(name, value string) error {
	err := f.Set(name, value)
	if err == nil {
		return nil
	}
	g, ok := f.Lookup(name).Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case int, int64:
		return errors.New("want a whole number")
	case uint, uint64:
		return errors.New("want a whole number, 0 or more")
	case float64:
		return errors.New("want a number")
	case bool:
		return errors.New("want true or false")
	}
	return err
}

// errVersion is parseArgs' answer to --version: print the version, run
// nothing.
var errVersion = errors.New("version asked")

// parseArgs sets fs's flags from args: --name value, --name=value, and a
// single dash alike; a bool flag takes no value unless after =. It
// returns flag.ErrHelp for -h and --help, errVersion for --version, and an
// error naming the nearest flag for one that does not exist.
func parseArgs(fs *flags, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return fmt.Errorf("unexpected argument %q", args[i+1])
			}
			return nil
		}
		if len(a) < 2 || a[0] != '-' {
			return fmt.Errorf("unexpected argument %q", a)
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "" || name[0] == '-' {
			return fmt.Errorf("bad flag syntax: %s", a)
		}
		f := fs.Lookup(name)
		if f == nil {
			switch {
			case name == "h" || name == "help":
				return flag.ErrHelp
			case name == "version" && !hasValue:
				return errVersion
			}
			return &unknownFlagError{name: name, nearest: nearest(name, fs.names())}
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && ok && b.IsBoolFlag() {
			value = "true"
		} else if !hasValue {
			if i+1 == len(args) {
				kind, _ := flag.UnquoteUsage(f)
				return fmt.Errorf("--%s needs a value (%s)", name, kind)
			}
			i++
			value = args[i]
		}
		if err := fs.set(name, value); err != nil {
			return fmt.Errorf("--%s %q: %w", name, value, err)
		}
	}
	return nil
}

// unknownFlagError is a flag that does not exist, and the one meant.
type unknownFlagError struct{ name, nearest string }

func (e *unknownFlagError) Error() string {
	if e.nearest == "" {
		return fmt.Sprintf("unknown flag --%s\nreprise --help lists every flag", e.name)
	}
	return fmt.Sprintf("unknown flag --%s\ndid you mean --%s? (reprise --help lists every flag)", e.name, e.nearest)
}

// names lists fs's flags, sorted.
func (f *flags) names() []string {
	var out []string
	f.VisitAll(func(fl *flag.Flag) { out = append(out, fl.Name) })
	return out
}

// nearest is the name among names closest to s by edit distance, when
// it is close enough to be what was meant (at most 2 edits, or a third of
// s); "" when none is.
func nearest(s string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		if d := levenshtein.ComputeDistance(s, n); best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" || bestD > 2 && bestD*3 > len(s) {
		return ""
	}
	return best
}

// envName is the environment variable of the flag name.
func envName(name string) string {
	return "REPRISE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// unknownVar is a REPRISE_* variable that names no flag, and the nearest
// one that does ("" when none is near).
type unknownVar struct{ name, nearest string }

// unknownEnv returns the REPRISE_* variables of environ that name no
// flag and are not among used.
func unknownEnv(environ []string, used ...string) []unknownVar {
	var names []string
	for _, n := range newFlagSet(&config{}, new(string)).names() {
		names = append(names, envName(n))
	}
	var out []unknownVar
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "REPRISE_") || slices.Contains(names, k) || slices.Contains(used, k) {
			continue
		}
		out = append(out, unknownVar{k, nearest(k, names)})
	}
	return out
}

// usageLine is a flag's one line of --help: its name and value, its
// meaning, its default.
func usageLine(f *flag.Flag) string {
	kind, usage := flag.UnquoteUsage(f)
	switch f.Value.(type) {
	case *durationValue:
		if kind == "value" {
			kind = "duration"
		}
	case *choiceValue, *levelValue:
		if kind == "value" {
			kind = "string"
		}
	}
	switch {
	case strings.Contains(usage, "(default"): // the usage says it best
	case f.DefValue == "":
		usage += " (default: unset)"
	default:
		usage += " (default " + f.DefValue + ")"
	}
	return strings.TrimSpace("--"+f.Name+" "+kind) + "\t" + usage
}

// writeHelp writes --help: the flags by section, each on one line.
func writeHelp(w io.Writer) {
	fs := newFlagSet(&config{}, new(string))
	fmt.Fprint(w, `Usage: reprise [--flag value]…
       reprise --version

reprise is a durable proxy for streaming LLM APIs. With no flags it serves a
demo on http://localhost:8080/ (embedded JetStream under ./data, a fake model).

Every flag is also the variable REPRISE_<NAME> (--log-level: REPRISE_LOG_LEVEL)
and a "name = value" line of --config FILE; a flag beats the variable, which
beats the file. Durations take ns, us, ms, s, m, h, d (24h) and w (7d), combined
as in 1h30m or 1d12h; a bare 0 is zero.
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for g := range groupCount {
		fmt.Fprintf(tw, "\n%s:\n", groupTitles[g])
		fs.VisitAll(func(f *flag.Flag) {
			if fs.group[f.Name] == g {
				fmt.Fprintf(tw, "  %s\n", usageLine(f))
			}
		})
	}
	_ = tw.Flush()
}
