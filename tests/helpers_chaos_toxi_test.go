package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/reprise-dev/reprise/internal/engine"
)

// toxiproxy v2 runs inside the test process: every link is a
// toxiproxy.Proxy (a loopback TCP listener that forwards each connection to
// its upstream through the toxic chain), and toxics are added and removed
// through the proxy's ToxicCollection, exactly as toxiproxy's HTTP API does.

// toxi is an in-process toxiproxy server (no HTTP API is listened on).
type toxi struct {
	srv *toxiproxy.ApiServer
	n   atomic.Int64
}

func newToxi() *toxi {
	return &toxi{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// toxicLink is one proxy: 127.0.0.1:random → upstream.
type toxicLink struct {
	p    *toxiproxy.Proxy
	addr string
	once sync.Once
}

// link starts a proxy in front of upstream (host:port).
func (x *toxi) link(upstream string) (*toxicLink, error) {
	name := fmt.Sprintf("link-%d", x.n.Add(1))
	p := toxiproxy.NewProxy(x.srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s → %s: %w", name, upstream, err)
	}
	p.Lock() // Listen is rewritten with the real port by the proxy's goroutine
	addr := p.Listen
	p.Unlock()
	return &toxicLink{p: p, addr: addr}, nil
}

// add adds a toxic. stream is "downstream" (upstream → client) or
// "upstream" (client → upstream). It applies to the live connections too.
func (l *toxicLink) add(name, typ, stream string, attrs map[string]any) error {
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := l.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("toxic %s (%s): %w", name, typ, err)
	}
	return nil
}

// addCloser adds a toxic that closes the link (limit_data, reset_peer,
// timeout) behind a drain guard, see drainGuard.
func (l *toxicLink) addCloser(name, typ, stream string, attrs map[string]any) error {
	if err := l.add(name+"_guard", drainGuardType, stream, map[string]any{"wait": drainWait}); err != nil {
		return err
	}
	return l.add(name, typ, stream, attrs)
}

// seal ends both chains with a drain guard, so that a connection whose far
// end hung up (toxiproxy stops reading a chain when a write fails) lets
// every stub finish. Toxics added after it must not send to a dead output:
// only reset_peer and timeout (which drop what they read) are.
func (l *toxicLink) seal() error {
	for _, dir := range []string{"downstream", "upstream"} {
		if err := l.add("tail_guard_"+dir, drainGuardType, dir, map[string]any{"wait": drainWait}); err != nil {
			return err
		}
	}
	return nil
}

// close stops the proxy and closes every connection through it.
func (l *toxicLink) close() { l.once.Do(l.p.Stop) }

// drainGuard passes data through unchanged. In toxiproxy v2.5.0 a stub
// sends to the next one with a plain channel send, and nothing reads a
// chain any more once (a) a closing toxic (limit_data, reset_peer, timeout)
// closed its stub, or (b) the link's writer hit a write error (the far end
// hung up): the stub in front then blocks forever, one leaked goroutine per
// cut connection that still had data coming. The guard sits in front of
// each closing toxic and at the end of each chain; once a send has blocked
// for Wait ms it forwards nothing more and drops its input until the input
// ends, so every stub of the link finishes. A stream it stops forwarding is
// cut at a chunk boundary, like any cut, and only after the link was dead.
type drainGuard struct {
	Wait int64 `json:"wait"`
}

type drainState struct{ draining bool }

const (
	drainGuardType = "chaos_drain_guard"
	drainWait      = 1500 // ms
)

func init() { toxics.Register(drainGuardType, new(drainGuard)) }

func (t *drainGuard) NewState() any { return new(drainState) }

func (t *drainGuard) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*drainState)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if st.draining {
				continue
			}
			timer := time.NewTimer(time.Duration(t.Wait) * time.Millisecond)
			select {
			case stub.Output <- c:
			case <-timer.C:
				st.draining = true
			}
			timer.Stop()
		}
	}
}

// routeHeader carries a run's id from the client through reprise (which
// forwards it to the upstream unchanged) to the router below.
const routeHeader = "OpenAI-Project"

// router is reprise's upstream transport in the chaos world: reprise's own
// http.Transport (stream.DefaultClient's), but each request is sent to the
// toxiproxy link of the run it belongs to, so that a run's upstream faults
// hit only its own generations. Requests of an unknown run fail loudly.
type router struct {
	base *http.Transport
	mu   sync.Mutex
	to   map[string]string
}

func newRouter() *router {
	base := engine.DefaultClient(2*time.Second, 5*time.Second).Transport.(*http.Transport)
	return &router{base: base, to: map[string]string{}}
}

func (rt *router) set(run, addr string) {
	rt.mu.Lock()
	rt.to[run] = addr
	rt.mu.Unlock()
}

func (rt *router) remove(run string) {
	rt.mu.Lock()
	delete(rt.to, run)
	rt.mu.Unlock()
}

func (rt *router) RoundTrip(req *http.Request) (*http.Response, error) {
	run := req.Header.Get(routeHeader)
	if v := req.Header[routeHeader]; len(v) > 0 { //nolint:staticcheck // the raw spelling on purpose
		run = v[0] // reprise forwards headers under their usual spelling, not the canonical one
	}
	rt.mu.Lock()
	addr, ok := rt.to[run]
	rt.mu.Unlock()
	if !ok {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("chaos router: no upstream link for run %q", run)
	}
	r2 := req.Clone(req.Context())
	r2.URL.Host = addr
	r2.Host = ""
	return rt.base.RoundTrip(r2)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the base transport.
func (rt *router) CloseIdleConnections() { rt.base.CloseIdleConnections() }
