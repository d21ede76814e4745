package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xhit/go-str2duration/v2"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream"
)

// config is the command line. Every flag is also a REPRISE_* variable and
// a config-file entry; a flag beats the variable, which beats the file.
// What the proxy is built from is p; the rest is the command's own.
type config struct {
	p proxy.Config

	listen   string
	upstream string
	// formerKeylessWindow is --sdk-retry-window, the former name of
	// --keyless-retry-window: it counts only where the new name is not set.
	formerKeylessWindow time.Duration
	// upstreamURLs is --upstream parsed; nil for demo.
	upstreamURLs []*url.URL
	data         string
	dataMax      int64 // --data-max: the embedded JetStream's disk cap (0: NATS's own)
	nats         string
	grace        time.Duration
	secret       string
	logLevel     slog.Level
	logFormat    string // json or text

	// allowOpenRelay: --auth none with an upstream key may listen beyond
	// loopback (openRelay).
	allowOpenRelay bool

	// page: serve the demo page at / (--page); off, only /reprise.js of
	// the web package is served.
	page bool

	upstreams      string // routes file
	prices         string // price table file
	connectTimeout time.Duration
	headerTimeout  time.Duration
	proxyKeys      string // file
	secretFile     string
	tlsCert        string
	tlsKey         string
	natsCreds      string
	natsCA         string

	// environ is the process's environment (os.Environ): its REPRISE_*
	// variables that name no flag are warned about at start.
	environ []string

	// setBy names where each flag not on the command line got its value
	// (REPRISE_X, or the --config file), for the errors about it.
	setBy map[string]string

	// registerer takes the metrics. Default prometheus.DefaultRegisterer
	// (tests that run several instances give each its own).
	registerer prometheus.Registerer
}

func newFlagSet(c *config, file *string) *flags {
	p := &c.p
	fs := newFlags()
	fs.in(groupServer).StringVar(file, "config", "", "settings `FILE`: one name = value line per setting, names as the flags (a flag beats REPRISE_*, which beats the file)")
	fs.in(groupServer).StringVar(&c.listen, "listen", ":8080", "HTTP listen address")
	fs.in(groupServer).DurationVar(&c.grace, "grace", 30*time.Second, "on SIGTERM, how long running generations may finish journaling")
	fs.in(groupServer).BoolVar(&c.page, "page", true, "serve the demo page at / (and its scripts and style); false: only the API, /reprise.js (the client helper apps load) and the probes")
	fs.in(groupServer).StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS with this certificate `FILE` (with --tls-key)")
	fs.in(groupServer).StringVar(&c.tlsKey, "tls-key", "", "the TLS private key `FILE`")
	fs.in(groupServer).Func("cors-origins", "`ORIGINS` (comma-separated: https://app.example, https://*.example.com, or * for any) whose pages may call the proxy from a browser: preflights answered, Location, Idempotency-Key and Reprise-* exposed; never with cookies (default none)", func(v string) (err error) {
		p.HTTP.CORSOrigins, err = stream.ParseOrigins(v)
		return err
	})
	fs.in(groupServer).DurationVar(&p.HTTP.KeylessRetryWindow, "keyless-retry-window", stream.DefaultKeylessRetryWindow, "a request without a key, the same (tenant, path, body, client session) as one whose client left before its result within this window, is its retry: it attaches or replays instead of generating again; 0 turns it off (per request: header Reprise-Keyless-Retry: off)")
	fs.in(groupServer).DurationVar(&c.formerKeylessWindow, "sdk-retry-window", stream.DefaultKeylessRetryWindow, "the former name of --keyless-retry-window")
	fs.in(groupUpstream).StringVar(&c.upstream, "upstream", "demo", "model API base URL: http://host:port (the client's /v1/… appended) or the API's version root as an SDK's base_url names it (https://host/api/paas/v4: /v1/X goes to …/api/paas/v4/X), or an ordered list URL,URL,… a generation fails over along before its first byte; demo = built-in fake model")
	fs.in(groupUpstream).StringVar(&c.upstreams, "upstreams", "", "a `FILE` of named upstreams, one per line: name url [key_env=VAR] [auth=bearer|x-api-key|api-key] [paths=/v1/messages,…] [models=claude-*,…]; the URL's path is the API's version root (a client's /v1/X goes to its path + /X), its query is sent with every request; replaces --upstream")
	fs.in(groupUpstream).BoolVar(&p.UpstreamIdempotency, "upstream-idempotency", false, "the upstream honours Idempotency-Key: forward one per generation and retry requests that were sent but got no answer")
	fs.in(groupUpstream).BoolVar(&p.UpstreamBackground, "upstream-background", false, "the upstream runs OpenAI's background mode: streamed /v1/responses generations are started with background: true, and one whose instance died is reattached (GET /v1/responses/{id}?stream=true&starting_after=N) by the instance that takes it over instead of failing")
	fs.in(groupUpstream).IntVar(&p.Policy.MaxAttempts, "retry-attempts", classify.DefaultMaxAttempts, "upstream requests per generation at most, the first included")
	fs.in(groupUpstream).DurationVar(&p.Policy.BaseDelay, "retry-base-delay", classify.DefaultBaseDelay, "backoff base: wait before retry n is uniform in [0, min(max, base·2ⁿ⁻¹)]")
	fs.in(groupUpstream).DurationVar(&p.Policy.MaxDelay, "retry-max-delay", classify.DefaultMaxDelay, "backoff cap")
	fs.in(groupUpstream).DurationVar(&p.Policy.Deadline, "retry-deadline", classify.DefaultDeadline, "how long a call may keep retrying: a wait and the attempt after it that would end past it are not taken; an attempt the upstream got is never cut (--header-timeout bounds it)")
	fs.in(groupUpstream).Float64Var(&p.Policy.BudgetRatio, "retry-budget", classify.DefaultBudgetRatio, "retries at most this share of calls over the budget window")
	fs.in(groupUpstream).UintVar(&p.Policy.BudgetMin, "retry-budget-min", classify.DefaultBudgetMin, "retries always allowed per budget window, whatever the share")
	fs.in(groupUpstream).DurationVar(&p.Policy.BudgetWindow, "retry-budget-window", classify.DefaultBudgetWindow, "sliding window of the retry budget")
	fs.in(groupUpstream).UintVar(&p.Policy.BreakerFailures, "breaker-failures", classify.DefaultBreakerFailures, "consecutive upstream failures that open the circuit breaker")
	fs.in(groupUpstream).DurationVar(&p.Policy.BreakerDelay, "breaker-delay", classify.DefaultBreakerDelay, "how long the breaker stays open before one probe")
	fs.in(groupUpstream).IntVar(&p.Policy.MaxConcurrent, "upstream-concurrency", classify.DefaultMaxConcurrent, "generations in flight toward the upstream at most")
	fs.in(groupUpstream).DurationVar(&p.Policy.QueueTimeout, "upstream-queue-timeout", classify.DefaultQueueTimeout, "how long a generation waits for a place before 503 upstream_saturated")
	fs.in(groupUpstream).DurationVar(&c.connectTimeout, "connect-timeout", engine.DefaultConnectTimeout, "connecting to the upstream (then the attempt is retryable)")
	fs.in(groupUpstream).DurationVar(&c.headerTimeout, "header-timeout", engine.DefaultHeaderTimeout, "waiting for a response head after the request was sent (then the attempt is ambiguous); a non-streamed answer's head comes once it is whole: set it above the longest")
	fs.in(groupUpstream).DurationVar(&p.Limits.IdleTimeout, "idle-timeout", engine.DefaultIdleTimeout, "a stream with no event for this long is interrupted")
	fs.in(groupUpstream).DurationVar(&p.Limits.MaxGeneration, "max-generation", engine.DefaultMaxGeneration, "one generation's total time at most")
	fs.in(groupUpstream).DurationVar(&p.Limits.CancelUnread, "cancel-unread", 0, "cancel a streamed generation that nobody, on any instance, read for this long since its upstream answered (0: never; it runs to its end for clients that come back)")
	fs.in(groupUpstream).Float64Var(&p.CostGuard.Ratio, "cost-guard-ratio", 0, "cost guard: when the last hour spent more than this share over the previous hour (0.3: +30%), retry connect failures only until it calms down; needs --prices; 0 off")
	fs.in(groupUpstream).Float64Var(&p.CostGuard.MinHourly, "cost-guard-min-hourly", 0, "cost guard: a previous hour that spent less than this is no baseline for --cost-guard-ratio")
	fs.in(groupUpstream).Float64Var(&p.CostGuard.DailyBudget, "daily-budget", 0, "cost guard: while the last 24 hours spent more than this, retry connect failures only; needs --prices; 0 off")
	fs.in(groupStorage).StringVar(&c.data, "data", "./data", "embedded JetStream storage and the server secret; one instance per directory (a second one refuses to start)")
	fs.in(groupStorage).Int64Var(&c.dataMax, "data-max", 0, "bytes the embedded JetStream may store under --data at most; past it writes are refused (503 journal_full, /readyz 503) until old events expire; 0: three quarters of the volume's free space at start (NATS's default)")
	fs.in(groupStorage).StringVar(&c.nats, "nats", "", "external NATS cluster URL[,URL] instead of the embedded server")
	fs.in(groupStorage).StringVar(&c.natsCreds, "nats-creds", "", "NATS credentials `FILE` for an external cluster")
	fs.in(groupStorage).StringVar(&c.natsCA, "nats-ca", "", "CA certificate `FILE` to verify an external cluster's TLS")
	fs.in(groupStorage).DurationVar(&p.Journal.TTL, "ttl", 24*time.Hour, "how long keys, journals and completed results are kept; at least 1m and --max-generation plus --lease (30m10s with their defaults)")
	fs.in(groupStorage).DurationVar(&p.Lease, "lease", resume.DefaultLease, "owner lease of a running generation; a dead owner's generation fails after it")
	fs.in(groupStorage).DurationVar(&p.Journal.AppendTimeout, "journal-timeout", journal.DefaultAppendTimeout, "how long a journal message may go unanswered (NATS reconnects, elections, an outage) before its generation fails journal_failure: its upstream call is cut, and what it holds is stored once NATS answers, however late")
	fs.in(groupStorage).IntVar(&p.Journal.Replicas, "replicas", 1, "JetStream replicas of the journal (3 on a cluster)")
	fs.in(groupStorage).DurationVar(&p.Journal.Linger, "journal-linger", journal.DefaultLinger, "how long events already shown to the owner's readers may wait to share one journal message while readers on other instances follow the generation: they see them up to that much later; 0: none")
	fs.in(groupStorage).DurationVar(&p.Journal.LingerAlone, "journal-linger-alone", journal.DefaultLingerAlone, "--journal-linger while only the owner's readers follow a generation: far fewer publishes per live token; a reader elsewhere cuts it to --journal-linger; an owner that dies loses up to that much of what it showed (the generation fails either way); 0: as --journal-linger")
	fs.in(groupStorage).Int64Var(&p.ResultsCache, "results-cache", engine.DefaultResultsCache, "bytes of streamed results that completed on this instance kept in memory, least recently read out first, so that a resume or a replay of one here reads no journal (one result at most an eighth of it); 0: none")
	fs.in(groupLimits).Int64Var(&p.HTTP.MaxBody, "max-body", stream.DefaultMaxBody, "request body limit in bytes (413 above)")
	fs.in(groupLimits).IntVar(&p.Limits.MaxEventSize, "max-event-size", engine.DefaultMaxEventSize, "one upstream SSE event at most as sent, all its lines, bytes (larger: the generation fails); must fit one NATS message (max_payload less 4 KiB)")
	fs.in(groupLimits).IntVar(&p.Limits.MaxStreamEvents, "max-stream-events", engine.DefaultMaxStreamEvents, "events per generation at most (stream_too_large)")
	fs.in(groupLimits).Int64Var(&p.Limits.MaxStreamBytes, "max-stream-bytes", engine.DefaultMaxStreamBytes, "bytes stored per generation at most: each event's type and data plus 92 (stream_too_large)")
	fs.in(groupLimits).IntVar(&p.Limits.MaxTenantGenerations, "max-tenant-generations", 0, "concurrent generations per tenant on this instance (429 above); 0: the same as --upstream-concurrency")
	fs.in(groupLimits).IntVar(&p.HTTP.MaxReadersPerKey, "max-readers-per-key", stream.DefaultMaxReadersPerKey, "concurrent readers of one key on this instance (429 above)")
	fs.in(groupLimits).IntVar(&p.HTTP.MaxReadersPerTenant, "max-readers-per-tenant", stream.DefaultMaxReadersPerTenant, "concurrent readers of one tenant's keys on this instance (429 above)")
	fs.in(groupLimits).IntVar(&p.HTTP.ReplayTurns, "replay-turns", 0, "batches of stored events this instance's readers write at once; the others wait their turn, given in rotation to the tenants that wait, so one tenant's bulk replays do not set another's latency; 0: one per CPU but one (at least one); -1: off")
	fs.in(groupLimits).Int64Var(&p.HTTP.MaxWSMessage, "max-ws-message", stream.DefaultMaxWSMessage, "largest WebSocket message a client may send, bytes")
	fs.in(groupLimits).DurationVar(&p.HTTP.WriteTimeout, "write-timeout", stream.DefaultWriteTimeout, "each write to a reader (an event, a keep-alive) must finish within this, else the reader is cut (visibly) and resumes; the time between events does not count")
	fs.in(groupLimits).DurationVar(&p.HTTP.ShedLag, "shed-lag", stream.DefaultShedLag, "while the journal is this far behind (its oldest event not yet acknowledged), refuse new generations with 429 overloaded and Retry-After; running generations, duplicates, replays and resumes are served; 0 turns it off")
	fs.in(groupLimits).IntVar(&p.MaxHeaderBytes, "max-header-bytes", proxy.DefaultMaxHeaderBytes, "request header bytes at most (431 above)")
	fs.in(groupAuth).Var(newChoice((*string)(&p.Auth.Mode), string(auth.Passthrough), string(auth.Passthrough), string(auth.Static), string(auth.None)), "auth", "passthrough (the caller's bearer goes upstream), static (callers use --proxy-keys; the upstream gets --upstream-key) or none (one anonymous tenant)")
	fs.in(groupAuth).StringVar(&p.Auth.TenantHeader, "tenant-header", "", "derive the tenant from this header instead of the bearer token")
	fs.in(groupAuth).StringVar(&c.proxyKeys, "proxy-keys", "", "static auth: a `FILE` of proxy keys, one per line (# comments)")
	fs.in(groupAuth).StringVar(&p.Auth.UpstreamKey, "upstream-key", "", "static and none auth: the upstream's API key (prefer REPRISE_UPSTREAM_KEY); never reaches clients")
	fs.in(groupAuth).StringVar(&c.secret, "secret", "", "server secret for tenant ids (default: generated once under --data)")
	fs.in(groupAuth).StringVar(&c.secretFile, "secret-file", "", "read the server secret from this `FILE`")
	fs.in(groupAuth).BoolVar(&c.allowOpenRelay, "allow-open-relay", false, "with --auth none and an upstream key (--upstream-key, key_env in --upstreams), listen beyond loopback anyway: whoever reaches the port spends the key (only behind something that authenticates callers)")
	fs.in(groupObservability).Var((*levelValue)(&c.logLevel), "log-level", "debug, info, warn or error")
	fs.in(groupObservability).Var(newChoice(&c.logFormat, "json", "json", "text"), "log-format", "`json` (one slog JSON object a line: the access log, the attempt log) or text (default json)")
	fs.in(groupObservability).StringVar(&c.prices, "prices", "", "a JSON `FILE` of model prices: {\"model or prefix*\": {\"input_per_1m\": N, \"output_per_1m\": N, \"per_call\": N}}; the status JSON's cost and reprise_cost_total (none without it)")
	fs.claim()
	return fs
}

func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	var file string
	fs := newFlagSet(&c, &file)
	if err := parseArgs(fs, args); err != nil {
		return c, err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	if file == "" {
		file = getenv("REPRISE_CONFIG")
	}
	fromFile := map[string]string{}
	if file != "" {
		var err error
		if fromFile, err = readConfigFile(file); err != nil {
			return c, err
		}
		for name := range fromFile {
			if fs.Lookup(name) == nil || name == "config" {
				if n := nearest(name, fs.names()); n != "" && n != "config" {
					return c, fmt.Errorf("%s: unknown setting %q; did you mean %q?", file, name, n)
				}
				return c, fmt.Errorf("%s: unknown setting %q", file, name)
			}
		}
	}
	c.setBy = map[string]string{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCommandLine[f.Name] || f.Name == "config" {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			c.setBy[f.Name] = env
			if e := fs.set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q (--%s): %w", env, v, f.Name, e)
			}
		} else if v, ok := fromFile[f.Name]; ok {
			c.setBy[f.Name] = file
			if e := fs.set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %s = %q: %w", file, f.Name, v, e)
			}
		}
	})
	if err != nil {
		return c, err
	}
	// A former name counts only where its new name is set nowhere (command
	// line, environment, file): the new name wins, whatever the order.
	for former, name := range formerNames {
		if set := func(n string) bool { return onCommandLine[n] || c.setBy[n] != "" }; set(former) && !set(name) {
			if err := fs.set(name, fs.Lookup(former).Value.String()); err != nil {
				return c, err
			}
			c.setBy[name] = c.setBy[former]
		}
	}
	return c, c.validate()
}

// formerNames maps each flag's former name to its name.
var formerNames = map[string]string{"sdk-retry-window": "keyless-retry-window"}

// invalid is the error for flag name's value v, want saying what it should
// be; it names the variable or the file that set it, if one did.
func (c *config) invalid(name string, v any, want string) error {
	if d, ok := v.(time.Duration); ok {
		v = str2duration.String(d)
	}
	flag := "--" + name
	if v != nil { // nil: not to be repeated (a secret)
		flag += fmt.Sprint(" ", v)
	}
	if by := c.setBy[name]; by != "" {
		flag += " (from " + by + ")"
	}
	return errors.New(flag + ": " + want)
}

// maxBreakerFailures bounds --breaker-failures: the breaker keeps a bit
// per failure it counts (a trillion would take all the memory there is).
const maxBreakerFailures = 10000

// budgetWindowMin is the shortest retry budget window classify takes (its
// ten buckets of at least 1 ms).
const budgetWindowMin = 10 * time.Millisecond

// validate checks every value against its range before anything starts,
// naming the flag and what it takes, and fills the defaults that depend
// on other flags.
func (c *config) validate() error {
	p := &c.p
	pol := &p.Policy
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	for _, r := range []struct {
		ok   bool
		name string
		v    any
		want string
	}{
		{c.grace >= 0, "grace", c.grace, "must not be negative"},
		{p.HTTP.KeylessRetryWindow >= 0, "keyless-retry-window", p.HTTP.KeylessRetryWindow, "must not be negative (0 turns it off)"},
		{pol.MaxAttempts >= 1 && pol.MaxAttempts <= 10, "retry-attempts", pol.MaxAttempts, "must be 1 to 10 (1: no retries)"},
		{pol.BaseDelay >= 0, "retry-base-delay", pol.BaseDelay, "must not be negative"},
		{pol.MaxDelay >= 0 && (pol.MaxDelay == 0 || pol.MaxDelay >= pol.BaseDelay), "retry-max-delay", pol.MaxDelay, "must be at least --retry-base-delay (" + str2duration.String(pol.BaseDelay) + ")"},
		{pol.Deadline >= 0, "retry-deadline", pol.Deadline, "must not be negative"},
		{pol.BudgetRatio >= 0 && pol.BudgetRatio <= 1, "retry-budget", pol.BudgetRatio, "must be 0 to 1 (a share of the calls)"},
		{pol.BudgetWindow == 0 || pol.BudgetWindow >= budgetWindowMin, "retry-budget-window", pol.BudgetWindow, "must be at least " + budgetWindowMin.String()},
		{pol.BreakerFailures >= 1 && pol.BreakerFailures <= maxBreakerFailures, "breaker-failures", pol.BreakerFailures, fmt.Sprintf("must be 1 to %d", maxBreakerFailures)},
		{pol.BreakerDelay >= 0, "breaker-delay", pol.BreakerDelay, "must not be negative"},
		{pol.MaxConcurrent >= 0, "upstream-concurrency", pol.MaxConcurrent, "must be at least 1"},
		{pol.QueueTimeout >= 0, "upstream-queue-timeout", pol.QueueTimeout, "must not be negative"},
		{c.connectTimeout > 0, "connect-timeout", c.connectTimeout, "must be more than 0"},
		{c.headerTimeout > 0, "header-timeout", c.headerTimeout, "must be more than 0"},
		{p.Limits.IdleTimeout > 0, "idle-timeout", p.Limits.IdleTimeout, "must be more than 0"},
		{p.Limits.MaxGeneration > 0, "max-generation", p.Limits.MaxGeneration, "must be more than 0"},
		{p.Limits.CancelUnread == 0 || p.Limits.CancelUnread >= time.Second, "cancel-unread", p.Limits.CancelUnread, "must be 0 (never) or at least 1s"},
		{p.CostGuard.Ratio >= 0 && finite(p.CostGuard.Ratio), "cost-guard-ratio", p.CostGuard.Ratio, "must be 0 (off) or more (0.3: +30%)"},
		{p.CostGuard.MinHourly >= 0 && finite(p.CostGuard.MinHourly), "cost-guard-min-hourly", p.CostGuard.MinHourly, "must be 0 or more"},
		{p.CostGuard.DailyBudget >= 0 && finite(p.CostGuard.DailyBudget), "daily-budget", p.CostGuard.DailyBudget, "must be 0 (off) or more"},
		{p.Journal.TTL >= p.MinTTL(), "ttl", p.Journal.TTL, "must be at least " + str2duration.String(p.MinTTL()) + " (1m, and --max-generation plus --lease: a running generation's first events must not expire)"},
		{p.Lease >= 100*time.Millisecond, "lease", p.Lease, "must be at least 100ms"},
		{p.Journal.AppendTimeout >= time.Second, "journal-timeout", p.Journal.AppendTimeout, "must be at least 1s"},
		{p.Journal.Replicas >= 1 && p.Journal.Replicas <= 5, "replicas", p.Journal.Replicas, "must be 1 to 5"},
		{p.Journal.Linger >= 0 && p.Journal.Linger <= time.Second, "journal-linger", p.Journal.Linger, "must be 0 (none) to 1s"},
		{p.Journal.LingerAlone >= 0 && p.Journal.LingerAlone <= 5*time.Second, "journal-linger-alone", p.Journal.LingerAlone, "must be 0 (as --journal-linger) to 5s"},
		{p.ResultsCache >= 0, "results-cache", p.ResultsCache, "must be 0 (none) or more (bytes)"},
		{c.dataMax == 0 || c.dataMax >= 1<<20, "data-max", c.dataMax, "must be 0 (NATS's default) or at least 1048576 (bytes)"},
		{c.dataMax == 0 || c.nats == "", "data-max", c.dataMax, "is the embedded server's: with --nats, set max_file_store in the NATS server's configuration"},
		{p.HTTP.MaxBody > 0, "max-body", p.HTTP.MaxBody, "must be at least 1 (bytes)"},
		{p.Limits.MaxEventSize > 0, "max-event-size", p.Limits.MaxEventSize, "must be at least 1 (bytes)"},
		{p.Limits.MaxStreamEvents > 0, "max-stream-events", p.Limits.MaxStreamEvents, "must be at least 1"},
		{p.Limits.MaxStreamBytes > 0, "max-stream-bytes", p.Limits.MaxStreamBytes, "must be at least 1 (bytes)"},
		{p.Limits.MaxTenantGenerations >= 0, "max-tenant-generations", p.Limits.MaxTenantGenerations, "must not be negative (0: the same as --upstream-concurrency)"},
		{p.HTTP.MaxReadersPerKey > 0, "max-readers-per-key", p.HTTP.MaxReadersPerKey, "must be at least 1"},
		{p.HTTP.MaxReadersPerTenant > 0, "max-readers-per-tenant", p.HTTP.MaxReadersPerTenant, "must be at least 1"},
		{p.HTTP.ReplayTurns >= -1, "replay-turns", p.HTTP.ReplayTurns, "must be -1 (off), 0 (one per CPU) or more"},
		{p.HTTP.MaxWSMessage > 0, "max-ws-message", p.HTTP.MaxWSMessage, "must be at least 1 (bytes)"},
		{p.HTTP.WriteTimeout > 0, "write-timeout", p.HTTP.WriteTimeout, "must be more than 0"},
		{p.HTTP.ShedLag >= 0, "shed-lag", p.HTTP.ShedLag, "must not be negative (0 turns it off)"},
		{p.MaxHeaderBytes > 0, "max-header-bytes", p.MaxHeaderBytes, "must be at least 1 (bytes)"},
		{c.secret == "" || len(c.secret) >= 16, "secret", nil, "must be at least 16 characters"},
	} {
		if !r.ok {
			return c.invalid(r.name, r.v, r.want)
		}
	}
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case p.Auth.Mode == auth.Static && c.proxyKeys == "":
		return errors.New("--auth static needs --proxy-keys FILE")
	case (p.CostGuard.Ratio > 0 || p.CostGuard.DailyBudget > 0) && c.prices == "":
		return errors.New("the cost guard (--cost-guard-ratio, --daily-budget) needs --prices FILE")
	}
	if c.upstream != "demo" {
		for raw := range strings.SplitSeq(c.upstream, ",") {
			u, err := parseUpstream(raw)
			if err != nil {
				want := "want http(s)://host[:port], a comma-separated list of them, or demo"
				if strings.Contains(c.upstream, ",") {
					want = strconv.Quote(strings.TrimSpace(raw)) + ": " + want
				}
				return c.invalid("upstream", strconv.Quote(c.upstream), want)
			}
			c.upstreamURLs = append(c.upstreamURLs, u)
		}
	}
	if p.Limits.MaxTenantGenerations == 0 { // a tenant may fill the instance
		p.Limits.MaxTenantGenerations = cmp.Or(p.Policy.MaxConcurrent, classify.DefaultMaxConcurrent)
	}
	if p.HTTP.KeylessRetryWindow == 0 {
		p.HTTP.KeylessRetryWindow = -1 // --keyless-retry-window 0 turns keyless retry recognition off
	}
	if p.Journal.Linger == 0 {
		p.Journal.Linger = -1 // --journal-linger 0: none
	}
	if p.Journal.LingerAlone == 0 {
		p.Journal.LingerAlone = -1 // --journal-linger-alone 0: as --journal-linger
	}
	if p.HTTP.ShedLag == 0 {
		p.HTTP.ShedLag = -1 // --shed-lag 0 turns load shedding off
	}
	if p.ResultsCache == 0 {
		p.ResultsCache = -1 // --results-cache 0: none
	}
	p.Policy.RetryAmbiguous = p.UpstreamIdempotency
	if _, err := classify.New(p.Policy, engine.DefaultClient(time.Second, time.Second)); err != nil {
		return fmt.Errorf("the upstream call policy (--retry-*, --breaker-*, --upstream-*): %w", err) // a range the checks above missed
	}
	return nil
}

// readRoutes reads an upstreams file (proxy.ParseRoutes), checks each
// URL, and reads each key_env from the environment.
func readRoutes(path string, getenv func(string) string) ([]proxy.Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines, err := proxy.ParseRoutes(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	routes := make([]proxy.Route, 0, len(lines))
	for _, l := range lines {
		u, err := parseUpstream(l.URL)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", path, l.Line, l.URL, err)
		}
		rt := proxy.Route{Name: l.Name, URL: u, KeyHeader: l.Auth, Paths: l.Paths, Models: l.Models}
		if l.KeyEnv != "" {
			if rt.Key = getenv(l.KeyEnv); rt.Key == "" {
				return nil, fmt.Errorf("%s:%d: %s is not set", path, l.Line, l.KeyEnv)
			}
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

// readKeys reads a proxy keys file (auth.ParseKeys): one key a line, bare
// or named with its settings; # starts a comment.
func readKeys(path string) ([]auth.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return auth.ParseKeys(path, string(b))
}

// readConfigFile reads `name = value` lines; # starts a comment.
func readConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "#"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want name = value", path, n)
		}
		out[strings.TrimSpace(name)] = strings.Trim(strings.TrimSpace(value), `"`)
	}
	return out, sc.Err()
}
