package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// config is the command line; every flag is also a REPRISE_* variable.
type config struct {
	listen   string
	upstream string
	data     string
	nats     string
	ttl      time.Duration
	lease    time.Duration
	grace    time.Duration
	replicas int
	secret   string
	logLevel slog.Level
}

var errUsage = errors.New("usage")

func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("reprise", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv("REPRISE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			return v
		}
		return def
	}
	envDur := func(name string, def time.Duration) time.Duration {
		if v := env(name, ""); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				return d
			}
		}
		return def
	}
	fs.StringVar(&c.listen, "listen", env("listen", ":8080"), "HTTP listen address")
	fs.StringVar(&c.upstream, "upstream", env("upstream", "demo"), "OpenAI-compatible base URL (http://host:port); demo = built-in fake model")
	fs.StringVar(&c.data, "data", env("data", "./data"), "embedded JetStream storage and the server secret")
	fs.StringVar(&c.nats, "nats", env("nats", ""), "external NATS cluster URL[,URL] instead of the embedded server")
	fs.DurationVar(&c.ttl, "ttl", envDur("ttl", 24*time.Hour), "how long keys, journals and completed results are kept")
	fs.DurationVar(&c.lease, "lease", envDur("lease", 10*time.Second), "owner lease of a running generation; a dead owner's generation fails after it")
	fs.DurationVar(&c.grace, "grace", envDur("grace", 30*time.Second), "on SIGTERM, how long running generations may finish journaling")
	fs.IntVar(&c.replicas, "replicas", 1, "JetStream replicas of the journal (3 on a cluster)")
	fs.StringVar(&c.secret, "secret", env("secret", ""), "server secret for tenant ids (default: generated once under --data)")
	level := fs.String("log-level", env("log_level", "info"), "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, errUsage
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if v := env("replicas", ""); v != "" && !flagSet(fs, "replicas") {
		if _, err := fmt.Sscan(v, &c.replicas); err != nil {
			return c, fmt.Errorf("REPRISE_REPLICAS: %w", err)
		}
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("--log-level: %w", err)
	}
	if c.ttl < time.Minute {
		return c, fmt.Errorf("--ttl %s: must be at least 1m", c.ttl)
	}
	if c.lease < 100*time.Millisecond {
		return c, fmt.Errorf("--lease %s: must be at least 100ms", c.lease)
	}
	return c, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
