package main

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream"
)

// stackConfig holds the few settings the benchmark changes from reprise's
// defaults, so that its load can run at all (see BENCHMARKS.md).
type stackConfig struct {
	// upstreamConcurrency replaces classify.DefaultMaxConcurrent (512): the
	// mix runs 2,000 generations at once.
	upstreamConcurrency int
	// maxReaders replaces stream.DefaultMaxReadersPerKey (32) and
	// DefaultMaxReadersPerTenant (2,048): the memory phase attaches
	// thousands of one tenant's clients to a few streams.
	maxReaders int
	// natsTCP connects reprise to the embedded server over loopback TCP
	// instead of in-process (net.Pipe), as cmd/reprise does: an experiment.
	natsTCP bool
	// natsURLs, when set, is an external NATS (comma-separated URLs) that
	// reprise journals on, over TCP, instead of the embedded server.
	natsURLs string
	// replicas is the journal's Config.Replicas (0: 1).
	replicas int
	// memoryStorage journals in JetStream memory storage instead of files:
	// an experiment.
	memoryStorage bool
	// linger is the journal's Config.Linger (0: none), lingerAlone its
	// Config.LingerAlone (0: as linger).
	linger, lingerAlone time.Duration
	// resultsCache is the proxy's Config.ResultsCache (0: none; reprise's
	// default unless set).
	resultsCache int64
	// unfair starts stack.unfair.
	unfair bool
}

// stack is everything under test, in this process: the fake upstream, a
// pass-through reverse proxy in front of it, and reprise on an embedded
// JetStream with file storage (or on an external NATS, outside it).
type stack struct {
	dir string
	log *slog.Logger

	llm     *mockllm.Server
	emits   *emitLog
	up      *http.Server
	UpURL   string
	pass    *http.Server
	PassURL string

	emb    *journal.Embedded // nil with stackConfig.natsURLs
	nc     *nats.Conn
	rc     *nats.Conn // the key records' (journal.Config.Records)
	sc     *nats.Conn // the short reads' (journal.Config.ShortReads)
	js     jetstream.JetStream
	rep    *proxy.Proxy
	reg    *prometheus.Registry
	RepURL string
	// RepTLSURL is the same instance over TLS (HTTP/2 or HTTP/1.1), served
	// by repTLS, with the certificate RepCA (DER).
	repTLS    *http.Server
	RepTLSURL string
	RepCA     []byte
	// other is a second reprise instance on the same journal that runs no
	// generation: its readers read JetStream, as on any instance but a
	// generation's own.
	other    *proxy.Proxy
	OtherURL string
	// unfair is a third instance on the same journal whose replays take
	// no turns by tenant (stream.Settings.ReplayTurns < 0): the fair
	// phase compares it with the first in the same run. Started only
	// with stackConfig.unfair.
	unfair    *proxy.Proxy
	UnfairURL string

	// journalBefore is the journal stream's last sequence before reprise
	// opened it: 0 on a fresh server, more on an external one used before.
	journalBefore uint64
}

func serve(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return hs, "http://" + ln.Addr().String(), nil
}

func startStack(cfg stackConfig, log *slog.Logger) (_ *stack, err error) {
	dir, err := os.MkdirTemp("", "reprise-bench-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, log: log, emits: newEmitLog()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	// The fake upstream in zero-delay mode (prompts may still ask for a delay).
	s.llm = mockllm.New(mockllm.Config{TokenDelay: 0})
	if s.up, s.UpURL, err = serve(s.emits.wrap(s.llm)); err != nil {
		return nil, err
	}
	upURL, _ := url.Parse(s.UpURL)

	if s.pass, s.PassURL, err = serve(passThrough(upURL)); err != nil {
		return nil, err
	}

	// reprise, wired as cmd/reprise does.
	connect, err := s.startNATS(cfg)
	if err != nil {
		return nil, err
	}
	if s.nc, err = connect("reprise-bench"); err != nil {
		return nil, err
	}
	if s.rc, err = connect("reprise-bench-records"); err != nil {
		return nil, err
	}
	if s.sc, err = connect("reprise-bench-short"); err != nil {
		return nil, err
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	s.reg = prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.journalBefore, _ = s.journalMessages(ctx) // no stream yet: 0
	instance := func(reg prometheus.Registerer, turns int) (*proxy.Proxy, string, error) {
		p, err := proxy.New(ctx, proxy.Config{
			NATS:         s.nc,
			Journal:      journal.Config{Memory: cfg.memoryStorage, Linger: cmp.Or(cfg.linger, -1), LingerAlone: cmp.Or(cfg.lingerAlone, -1), Records: s.rc, ShortReads: s.sc, Replicas: cfg.replicas}, // file storage by default, 24 h TTL
			Owner:        "bench-" + resume.NewKey()[3:11],                                                                                                                                             // default lease
			Upstream:     upURL,
			Policy:       classify.Config{MaxConcurrent: cfg.upstreamConcurrency},
			HTTP:         stream.Settings{MaxReadersPerKey: cfg.maxReaders, MaxReadersPerTenant: cfg.maxReaders, ReplayTurns: turns},
			Auth:         auth.Config{Secret: secret, Mode: auth.Passthrough}, // the default; the tenant comes from the bearer token
			ResultsCache: cmp.Or(cfg.resultsCache, -1),
			Logger:       log, Registerer: reg,
		})
		if err != nil {
			return nil, "", err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", errors.Join(err, p.Shutdown(ctx))
		}
		go func() { _ = p.Serve(ln) }()
		return p, "http://" + ln.Addr().String(), nil
	}
	if s.rep, s.RepURL, err = instance(s.reg, 0); err != nil {
		return nil, err
	}
	if s.other, s.OtherURL, err = instance(prometheus.NewRegistry(), 0); err != nil {
		return nil, err
	}
	if cfg.unfair {
		if s.unfair, s.UnfairURL, err = instance(prometheus.NewRegistry(), -1); err != nil {
			return nil, err
		}
	}

	// The same instance over TLS on a second listener, with a certificate
	// made here: reprise serves HTTP/2 only over TLS (the memory phase's h2
	// readers). Proxy.Serve serves TLS only with Config.TLS, for all its
	// listeners (given a TLS listener without it, it ends asking for
	// certificate files: net/http's HTTP/2 setup in the first Serve gave
	// its server an empty TLS config), so this is an http.Server of the
	// bench's with the proxy as its handler and proxy.New's server
	// settings; its HTTP/2 has
	// net/http's defaults, as the proxy's (proxy.New sets none): 250
	// concurrent streams per connection.
	cert, der, err := selfSigned()
	if err != nil {
		return nil, err
	}
	s.RepCA = der
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.repTLS = &http.Server{
		Handler: s.rep, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() { _ = s.repTLS.ServeTLS(tln, "", "") }()
	s.RepTLSURL = "https://" + tln.Addr().String()
	return s, nil
}

// startNATS starts the embedded JetStream, unless cfg names an external
// NATS, and returns how to open a connection to the journal's server.
func (s *stack) startNATS(cfg stackConfig) (connect func(name string) (*nats.Conn, error), err error) {
	if cfg.natsURLs != "" {
		// As cmd/reprise connects to --nats: every server tried once,
		// each dial bounded, then reconnects for ever.
		return func(name string) (*nats.Conn, error) {
			opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.Timeout(2 * time.Second)}, journal.ConnectOptions()...)
			return nats.Connect(cfg.natsURLs, opts...)
		}, nil
	}
	ec := journal.EmbeddedConfig{Dir: s.dir}
	if cfg.natsTCP {
		ec.Port = -1
	}
	if s.emb, err = journal.StartEmbedded(ec); err != nil {
		return nil, err
	}
	return func(name string) (*nats.Conn, error) {
		if cfg.natsTCP {
			return nats.Connect(s.emb.Server.ClientURL(), append([]nats.Option{nats.Name(name)}, journal.ConnectOptions()...)...)
		}
		return s.emb.Connect(name)
	}, nil
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day, and
// returns it with its DER form (for a client to trust).
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "reprise-bench"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, der, nil
}

// passThrough is the pass-through: a plain reverse proxy, flushing every
// write, with the same upstream transport settings as reprise.
//
// Its handler runs full duplex. Without it, net/http's HTTP/1 server
// consumes and closes the request body when the handler starts its answer
// (golang/go#15527, #40747), while the reverse proxy's transport may still
// be reading that body: after it sent a Content-Length body's bytes
// upstream, it reads once more to see EOF. When the upstream's answer comes
// first (it has the whole body), that read finds the body closed ("invalid
// Read on closed Body"), the transport drops the upstream connection as a
// write failure, the answer's copy fails (use of closed network
// connection) and the client gets a cut stream (unexpected EOF): 1-5 of 200
// streams in a mix. And an answer to a body the client is still sending
// stalls: the server reads the body to its end before the answer's headers.
func passThrough(upURL *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(upURL)
	rp.FlushInterval = -1
	rp.Transport = engine.DefaultClient(engine.DefaultConnectTimeout, engine.DefaultHeaderTimeout).Transport
	rp.ErrorLog = stdlog.New(io.Discard, "", 0) // clients check what they got
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex() // an error on HTTP/2, which is full duplex anyway
		rp.ServeHTTP(w, r)
	})
}

// readers is reprise's gauge of connected stream readers (tail + journal).
func (s *stack) readers() int {
	mfs, err := s.reg.Gather()
	if err != nil {
		return -1
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "reprise_stream_readers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetGauge().GetValue()
		}
	}
	return int(n)
}

// deleteConsumers deletes the journal stream's consumers and returns how
// many there were. A journal.Reader that reads more than a few events makes
// an ordered consumer, and Close does not delete it: it stays on the server
// for nats.go's InactiveThreshold (5 min), and nats-server allows 1,000
// consumers per stream by default; past that every such read fails (see
// BENCHMARKS.md). The benchmark deletes them between samples, when no
// reader is attached, so that its own reads do not exhaust the limit.
func (s *stack) deleteConsumers(ctx context.Context) (int, error) {
	st, err := s.js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		return 0, err
	}
	var names []string
	lister := st.ConsumerNames(ctx)
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		return 0, err
	}
	for _, name := range names {
		if err := st.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, err
		}
	}
	return len(names), nil
}

// journalMessages is how many messages the journal's stream has stored
// since it was created (its last sequence).
func (s *stack) journalMessages(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// close stops reprise (failing generations still running after a short
// grace), the servers and JetStream, and removes the data directory.
func (s *stack) close() {
	if s.repTLS != nil { // its readers end with their connections
		_ = s.repTLS.Close()
	}
	for _, p := range []*proxy.Proxy{s.rep, s.other, s.unfair} {
		if p == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if p.Shutdown(ctx) != nil { // generations still running were cancelled: let them record it
			settle, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = p.Shutdown(settle)
			cancel()
		}
		cancel()
	}
	for _, hs := range []*http.Server{s.pass, s.up} {
		if hs == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := hs.Shutdown(ctx); err != nil {
			_ = hs.Close()
		}
		cancel()
	}
	if s.rc != nil {
		s.rc.Close()
	}
	if s.sc != nil {
		s.sc.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.emb != nil {
		s.emb.Shutdown()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// emitLog records when the fake upstream wrote each event of the streams
// whose User-Agent starts with mixAgent: the mix measures every event's
// arrival at the client against it. Both proxies forward User-Agent.
type emitLog struct {
	base time.Time
	mu   sync.Mutex
	m    map[string]*emitTimes
}

const mixAgent = "reprise-bench-mix/"

type emitTimes struct {
	mu sync.Mutex
	t  []time.Duration // since base, per data event in order
}

func newEmitLog() *emitLog { return &emitLog{base: time.Now(), m: map[string]*emitTimes{}} }

func (l *emitLog) since() time.Duration { return time.Since(l.base) }

func (l *emitLog) get(agent string) *emitTimes {
	l.mu.Lock()
	defer l.mu.Unlock()
	et := l.m[agent]
	if et == nil {
		et = &emitTimes{}
		l.m[agent] = et
	}
	return et
}

func (l *emitLog) reset() {
	l.mu.Lock()
	l.m = map[string]*emitTimes{}
	l.mu.Unlock()
}

func (et *emitTimes) times() []time.Duration {
	et.mu.Lock()
	defer et.mu.Unlock()
	return et.t
}

func (l *emitLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ua := r.Header.Get("User-Agent"); strings.HasPrefix(ua, mixAgent) {
			w = &timingWriter{ResponseWriter: w, l: l, et: l.get(ua)}
		}
		h.ServeHTTP(w, r)
	})
}

// timingWriter notes the time of every Write: the fake upstream writes one
// SSE event per Write (headers are flushed without one).
type timingWriter struct {
	http.ResponseWriter
	l  *emitLog
	et *emitTimes
}

func (w *timingWriter) Write(p []byte) (int, error) {
	w.et.mu.Lock()
	w.et.t = append(w.et.t, w.l.since())
	w.et.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w *timingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *timingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
