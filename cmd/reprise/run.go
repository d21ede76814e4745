package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/telemetry"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/web"
)

// run serves until ctx ends, then shuts down gracefully. ready, when not nil,
// receives the listen address once the proxy serves.
//
// What can be checked before anything is made is checked first: the files
// the flags name, the listen address (bound once and let go: it is taken
// for good only once the proxy can serve, so that nobody's connection
// waits on a port nothing answers), an open relay. A start that fails after
// it made something on disk (the --data directory, the embedded store, the
// secret under it) removes what it made, and nothing that was there before.
func run(ctx context.Context, cfg config, log *slog.Logger, ready chan<- string) (err error) {
	var made created
	serving := false
	defer func() {
		if err != nil && !serving {
			made.undo()
		}
	}()
	pc := cfg.p
	// Named routes replace --upstream; the variables they read (key_env)
	// are no typo.
	var read []string
	if cfg.upstreams != "" {
		getenv := func(k string) string { read = append(read, k); return os.Getenv(k) }
		if pc.Routes, err = readRoutes(cfg.upstreams, getenv); err != nil {
			return fmt.Errorf("--upstreams: %w", err)
		}
	}
	warnUnknownEnv(log, cfg.environ, read)
	secret, err := readSecret(cfg) // nil: the one kept under --data, once NATS is up
	if err != nil {
		return err
	}
	if cfg.proxyKeys != "" {
		if pc.Auth.Keys, err = readKeys(cfg.proxyKeys); err != nil {
			return fmt.Errorf("--proxy-keys: %w", err)
		}
	}
	if cfg.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		pc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.prices != "" {
		if pc.Prices, err = cost.Load(cfg.prices); err != nil {
			return fmt.Errorf("--prices: %w", err)
		}
	}
	if cfg.nats != "" {
		for name, file := range map[string]string{"nats-creds": cfg.natsCreds, "nats-ca": cfg.natsCA} {
			if err := readable(file); err != nil {
				return fmt.Errorf("--%s: %w", name, err)
			}
		}
	}
	probe, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.listen, err)
	}
	bound := probe.Addr()
	_ = probe.Close()
	if err := openRelay(cfg, pc, bound); err != nil {
		return err
	}
	tel, err := telemetry.New(ctx) // nil unless an OTLP endpoint is set
	if err != nil {
		return err
	}
	if tel != nil {
		pc.Tracer = tel
		defer func() {
			flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tel.Shutdown(flush); err != nil {
				log.Warn("OpenTelemetry: flushing on exit failed", "err", err)
			}
		}()
	}
	conns, closeNATS, err := connectNATS(cfg, log, &made)
	if err != nil {
		return err
	}
	defer closeNATS()
	nc := conns.events
	pc.Journal.Records = conns.records  // lease renewals never wait behind the events
	pc.Journal.ShortReads = conns.reads // nor a small replay's reads behind the long ones
	if secret == nil {
		if secret, err = keptSecret(cfg.data, &made); err != nil {
			return err
		}
	}
	pc.Auth.Secret = secret
	upstreams := cfg.upstreamURLs
	if len(pc.Routes) > 0 {
		upstreams = []*url.URL{pc.Routes[0].URL}
	} else {
		if upstreams == nil { // demo
			var stopDemo func()
			if upstreams, stopDemo, err = startDemo(log); err != nil {
				return err
			}
			defer stopDemo()
		}
		pc.Upstream, pc.Fallbacks = upstreams[0], upstreams[1:]
	}
	pc.NATS, pc.Logger, pc.Registerer = nc, log, cfg.registerer
	if pc.Registerer == nil {
		pc.Registerer = prometheus.DefaultRegisterer
	}
	pc.Client = engine.DefaultClient(cfg.connectTimeout, cfg.headerTimeout)
	p, err := proxy.New(ctx, pc)
	if err != nil {
		return err
	}
	if cfg.page {
		web.Mount(p)
	} else {
		web.MountClient(p) // apps fetch the client helper; no page
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil { // taken since it was tried
		stopping, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(stopping)
		return fmt.Errorf("--listen %s: %w", cfg.listen, err)
	}

	defer reloadOnHangup(cfg, p, log)()
	errc := make(chan error, 1)
	serving = true // from here on the store holds what it served: a failure keeps it
	go func() { errc <- p.Serve(ln) }()
	if tel != nil {
		log.Info("OpenTelemetry: exporting GenAI metrics and traces over OTLP/HTTP")
	}
	if cfg.upstreamURLs == nil && len(pc.Routes) == 0 {
		log.Info("using the built-in demo upstream (a fake model, ~30 tokens/s)")
	}
	msg, attrs := readyLine(cfg, ln.Addr(), pc.TLS != nil, upstreams, pc.Routes)
	log.Info(msg, attrs...)
	if ready != nil {
		ready <- ln.Addr().String()
	}

	select {
	case err := <-errc:
		log.Error("serving failed", "err", err)
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: letting running generations finish", "grace", cfg.grace.String())
	grace, cancel := context.WithTimeout(context.Background(), cfg.grace)
	defer cancel()
	if err := p.Shutdown(grace); err != nil {
		// What still ran was cancelled: give it the journal's time to
		// record that it failed, so its key may start afresh at once.
		log.Warn("generations still running at the end of the grace period were failed", "err", err)
		settle, cancel := context.WithTimeout(context.Background(), cfg.p.Journal.AppendTimeout)
		defer cancel()
		_ = p.Shutdown(settle)
	}
	log.Info("reprise stopped")
	return nil
}

// openRelay refuses --auth none with an upstream key (--upstream-key, or a
// route's key_env) on an address beyond loopback, unless
// --allow-open-relay: whoever reaches the port would spend the key.
func openRelay(cfg config, pc proxy.Config, addr net.Addr) error {
	if pc.Auth.Mode != auth.None || cfg.allowOpenRelay {
		return nil
	}
	keyed := pc.Auth.UpstreamKey != ""
	for _, rt := range pc.Routes {
		keyed = keyed || rt.Key != ""
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !keyed || ok && tcp.IP.IsLoopback() {
		return nil
	}
	where := addr.String()
	if ok && tcp.IP.IsUnspecified() {
		where = "every interface"
	}
	_, port, err := net.SplitHostPort(cfg.listen)
	if err != nil {
		port = "8080"
	}
	return fmt.Errorf("--auth none with an upstream key on --listen %s (%s) is an open relay: whoever reaches the port spends the key; "+
		"listen on loopback (--listen 127.0.0.1:%s), authenticate callers (--auth static --proxy-keys FILE), "+
		"or pass --allow-open-relay if what is in front of reprise already does", cfg.listen, where, port)
}

// readyLine is the log line that says the instance serves: where (https://
// under --tls-cert; the demo page's address, or the base URL when --page is
// off; url: the base URL alone, for programs), the version, every upstream (the routes by name and host, or
// --upstream and its fallbacks), the store (the redacted --nats list, or the
// embedded store's --data) and the grace a SIGTERM gives.
func readyLine(cfg config, addr net.Addr, tls bool, upstreams []*url.URL, routes []proxy.Route) (string, []any) {
	msg := "reprise is ready: open " + pageURL(addr, tls)
	if !cfg.page {
		msg = "reprise is ready: serving " + pageURL(addr, tls) + " (no demo page: --page=false)"
	}
	attrs := []any{"url", strings.TrimSuffix(pageURL(addr, tls), "/"), "version", shortVersion()}
	if len(routes) > 0 {
		names := make([]string, len(routes))
		for i, rt := range routes {
			names[i] = cmp.Or(rt.Name, rt.URL.Host) + " " + rt.URL.Redacted()
		}
		attrs = append(attrs, "routes", names)
	} else {
		fallbacks := make([]string, 0, len(upstreams))
		for _, u := range upstreams[1:] {
			fallbacks = append(fallbacks, u.Redacted())
		}
		attrs = append(attrs, "upstream", upstreams[0].Redacted(), "fallbacks", fallbacks)
	}
	if cfg.nats != "" {
		attrs = append(attrs, "nats", redactURLs(cfg.nats))
	} else {
		attrs = append(attrs, "data", cfg.data)
	}
	return msg, append(attrs, "grace", cfg.grace.String())
}

// pageURL is the address a browser opens: localhost for a wildcard
// listener, https:// when the listener serves TLS.
func pageURL(a net.Addr, tls bool) string {
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		port := 8080
		if ok {
			port = tcp.Port
		}
		return fmt.Sprintf("%slocalhost:%d/", scheme, port)
	}
	return scheme + a.String() + "/"
}

// connectNATS connects to NATS three times: for the events, for the key
// records (journal.Config.Records), so that the owners' lease renewals do
// not queue behind the events of a loaded instance, and for the short
// reads (journal.Config.ShortReads), so that a small replay's reads do not
// queue behind the long replays'.
func connectNATS(cfg config, log *slog.Logger, made *created) (conns natsConns, closeAll func(), err error) {
	names := []string{"reprise", "reprise-records", "reprise-reads"}
	var open []*nats.Conn
	closeOpen := func() {
		for _, nc := range open {
			nc.Close()
		}
	}
	if cfg.nats != "" {
		// The first connection is tried once per server, each dial
		// bounded: a cluster that cannot be reached is an error at start,
		// not a proxy that waits for it without a word. Once connected,
		// the client reconnects for ever.
		opts := append([]nats.Option{nats.MaxReconnects(-1), nats.Timeout(natsDialTimeout)}, journal.ConnectOptions()...)
		if cfg.natsCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.natsCreds))
		}
		if cfg.natsCA != "" {
			opts = append(opts, nats.RootCAs(cfg.natsCA))
		}
		log.Info("connecting to NATS", "url", redactURLs(cfg.nats))
		for _, name := range names {
			nc, err := nats.Connect(cfg.nats, append(opts, nats.Name(name))...)
			if err != nil {
				closeOpen()
				return natsConns{}, nil, fmt.Errorf("cannot reach NATS at %s: %w", redactURLs(cfg.nats), err)
			}
			open = append(open, nc)
		}
		return natsConns{events: open[0], records: open[1], reads: open[2]}, func() {
			for _, nc := range open {
				_ = nc.Drain()
			}
		}, nil
	}
	dir := filepath.Join(cfg.data, "jetstream")
	if err := made.mkdirAll(dir); err != nil {
		return natsConns{}, nil, fmt.Errorf("--data %s: %w", cfg.data, err)
	}
	emb, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir, MaxStore: cfg.dataMax})
	if errors.Is(err, journal.ErrStoreInUse) {
		// Both would start, each blind to what the other stores: a key
		// completed on one would be unknown to the other, and generated
		// again.
		return natsConns{}, nil, fmt.Errorf("--data %s: another reprise is running on this directory (%w); give each instance its own --data, or run several on one NATS cluster with --nats", cfg.data, err)
	}
	if err != nil {
		return natsConns{}, nil, fmt.Errorf("--data %s: %w", cfg.data, err)
	}
	for _, name := range names {
		nc, err := emb.Connect(name)
		if err != nil {
			closeOpen()
			emb.Shutdown()
			return natsConns{}, nil, err
		}
		open = append(open, nc)
	}
	log.Info("embedded JetStream started", "dir", dir)
	return natsConns{events: open[0], records: open[1], reads: open[2]}, func() {
		for _, nc := range open {
			_ = nc.Drain()
		}
		closeOpen()
		emb.Shutdown()
	}, nil
}

// natsConns are an instance's connections to NATS (connectNATS).
type natsConns struct {
	events, records, reads *nats.Conn
}

// natsDialTimeout bounds connecting to each server of --nats at start.
const natsDialTimeout = 2 * time.Second

// redactURLs is a comma-separated URL list with any password replaced.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, raw := range parts {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// warnUnknownEnv logs each REPRISE_* variable that sets nothing — a typo
// would otherwise leave its default in force without a word — and the
// variable nearest to it. used are variables read otherwise (a routes
// file's key_env): no typo.
func warnUnknownEnv(log *slog.Logger, environ, used []string) {
	for _, u := range unknownEnv(environ, used...) {
		if u.nearest != "" {
			log.Warn("unknown environment variable: it sets nothing", "name", u.name, "nearest", u.nearest)
		} else {
			log.Warn("unknown environment variable: it sets nothing", "name", u.name)
		}
	}
}

// readSecret returns the server secret --secret or --secret-file gives;
// nil when neither does (keptSecret).
func readSecret(cfg config) ([]byte, error) {
	if cfg.secret != "" {
		return []byte(cfg.secret), nil // its length: validate
	}
	if cfg.secretFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(cfg.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--secret-file: %w", err)
	}
	if s := strings.TrimSpace(string(b)); len(s) >= 16 {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("--secret-file %s: the secret must be at least 16 characters", cfg.secretFile)
}

// keptSecret returns the secret kept under the data directory, made on the
// first run.
func keptSecret(data string, made *created) ([]byte, error) {
	path := filepath.Join(data, "secret")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 16 {
		return b, nil
	}
	if err := made.mkdirAll(data); err != nil {
		return nil, fmt.Errorf("--data %s: %w", data, err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if err := made.writeFile(path, b); err != nil {
		return nil, fmt.Errorf("--data %s: writing the secret: %w", data, err)
	}
	return b, nil
}

// readable reports why file (when named) cannot be read.
func readable(file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	return f.Close()
}

// created is what a start made on disk, to remove if it fails.
type created struct{ paths []string }

// mkdirAll makes dir and its missing parents (0o700), remembering the
// outermost one it made.
func (c *created) mkdirAll(dir string) error {
	top := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if top != "" {
		c.paths = append(c.paths, top)
	}
	return os.MkdirAll(dir, 0o700)
}

// writeFile writes path (0o600), remembering it when it is new.
func (c *created) writeFile(path string, b []byte) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		c.paths = append(c.paths, path)
	}
	return os.WriteFile(path, b, 0o600)
}

// undo removes what was made, newest first.
func (c *created) undo() {
	for i := len(c.paths) - 1; i >= 0; i-- {
		_ = os.RemoveAll(c.paths[i])
	}
	c.paths = nil
}

// parseUpstream reads an upstream's base URL: its path, if any, names the
// API's version root, as an SDK's base URL does (a client's /v1/X goes to
// path + /X; no path: /v1/X), and its query holds fixed parameters sent
// with every request (Azure's api-version). A trailing slash is dropped.
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("want http(s)://host[:port]")
	}
	if u.Fragment != "" || u.User != nil {
		return nil, errors.New("want http(s)://host[:port][/version-root][?fixed=query], no user or fragment")
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}

// startDemo starts the built-in fake model on a loopback port and returns
// its URL.
func startDemo(log *slog.Logger) ([]*url.URL, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("demo upstream: %w", err)
	}
	demo := &http.Server{
		Handler:           mockllm.New(mockllm.Config{TokenDelay: 33 * time.Millisecond, Tokens: 120, Readable: true, Background: true, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = demo.Serve(ln) }()
	return []*url.URL{{Scheme: "http", Host: ln.Addr().String()}}, func() { _ = demo.Close() }, nil
}
