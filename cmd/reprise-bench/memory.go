package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// memory attaches N idle clients (SSE over HTTP/1, WebSocket, SSE over
// HTTP/2 on TLS) to a few slow live streams and reads this process's VmRSS
// before and after. The clients run in a child process
// (this binary with --mem-child), so the RSS delta is reprise's side of the
// connections only: the socket, net/http's connection state and buffers,
// the reader goroutine, the SSE writer.
func (b *bench) memory() error {
	// The finer heap sampling run sets for this phase slows every
	// allocation after it too: the full run's throughput read the
	// pass-through at 187k events/s after it, 313–337k without.
	defer func() { runtime.MemProfileRate = defaultMemProfileRate }()
	var locs []string
	for i := range b.o.memStreams {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		// One event per second: live for the whole phase, far below the idle timeout.
		resp, err := b.c.post(ctx, b.rep, fmt.Sprintf("mem %d %s [tokens=100000] [delay=1s]", i, b.nonce),
			reqOpts{key: fmt.Sprintf("mem-%d-%s", i, b.nonce), bearer: "bench-mem"})
		if err != nil {
			cancel()
			return fmt.Errorf("slow stream: %w", err)
		}
		locs = append(locs, b.st.RepURL+resp.Header.Get("Location"))
		_, n, err := readTo(resp.Body, 1)
		resp.Body.Close()
		cancel()
		if err != nil || n < 1 {
			return fmt.Errorf("slow stream: no first event: %w", err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, transport := range b.o.memTransports {
		if err := b.memClients(exe, locs, transport); err != nil {
			return err
		}
	}
	return nil
}

// memClients measures each client count of the memory phase with clients
// reading over transport (sse, websocket or h2).
func (b *bench) memClients(exe string, locs []string, transport string) error {
	for _, n := range b.o.memClients {
		var rounds []*memResult
		var err error
		for range b.o.memRuns {
			var res *memResult
			res, err = b.memRound(exe, locs, n, transport)
			if res != nil && res.reached > 0 {
				rounds = append(rounds, res)
				b.progress("memory %d %s clients: reached %d, %.1f KB RSS per client (heap %.1f KB, stacks %.1f KB, %.2f goroutines) (load %s)",
					n, transport, res.reached, res.perClientKB, res.heapKB, res.stackKB, res.goroutines, loadAvg())
			}
			if err != nil || b.ctx.Err() != nil {
				break
			}
		}
		if len(rounds) > 0 {
			// The round with the median RSS per client, and every round's value.
			slices.SortFunc(rounds, func(a, b *memResult) int { return cmp.Compare(a.perClientKB, b.perClientKB) })
			med := *rounds[(len(rounds)-1)/2]
			for _, r := range rounds {
				med.rounds = append(med.rounds, r.perClientKB)
			}
			b.res.mem = append(b.res.mem, &med)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// settle collects garbage and returns freed memory to the OS, so RSS is
// what is live.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(300 * time.Millisecond)
}

// steadyReaders waits (bounded) until reprise's reader count stops changing
// — disconnected readers take a moment to go — and returns it.
func (b *bench) steadyReaders() int {
	n, since := b.st.readers(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if m := b.st.readers(); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= 500*time.Millisecond {
			break
		}
	}
	return n
}

func (b *bench) memRound(exe string, locs []string, n int, transport string) (*memResult, error) {
	base := b.steadyReaders()
	settle()
	var ms0, ms1 runtime.MemStats
	rss0 := rssKB()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	b.heapProfile(fmt.Sprintf("memory-%s-%d-before", transport, n))

	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	args := []string{"--mem-child", "--mem-child-n", strconv.Itoa(n), "--mem-child-transport", transport}
	if transport == "h2" { // the same streams on reprise's TLS listener
		tlsLocs := make([]string, len(locs))
		for i, l := range locs {
			tlsLocs[i] = b.st.RepTLSURL + strings.TrimPrefix(l, b.st.RepURL)
		}
		locs = tlsLocs
		args = append(args, "--mem-child-ca", base64.StdEncoding.EncodeToString(b.st.RepCA))
	}
	args = append(args, "--mem-child-urls", strings.Join(locs, ","))
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	stopChild := func() {
		_ = stdin.Close() // the child exits when its stdin closes
		var err error     // how it exited does not matter once the round is measured
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
		}
		_ = err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				lines <- sc.Text()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	var ready string
	select {
	case ready = <-lines:
	case err := <-exited:
		exited <- err
		stopChild()
		return nil, fmt.Errorf("client process ended before it was ready: %w", err)
	case <-ctx.Done():
		stopChild()
		return nil, ctx.Err()
	}
	res := &memResult{n: n, transport: transport}
	var failed int
	var childRSS int64
	if _, err := fmt.Sscanf(ready, "ready %d %d %d %d", &res.reached, &failed, &childRSS, &res.conns); err != nil {
		stopChild()
		return nil, fmt.Errorf("client process said %q", ready)
	}
	// Wait until reprise counts them, then let every client take a couple of
	// events (buffers in their steady state).
	deadline := time.Now().Add(30 * time.Second)
	for b.st.readers() < base+res.reached && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	res.serverReaders = b.st.readers() - base
	time.Sleep(2500 * time.Millisecond)
	settle()
	rss1 := rssKB()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()
	b.heapProfile(fmt.Sprintf("memory-%s-%d-after", transport, n))
	stopChild()
	// Wait until reprise has let them go (bounded), for the next round.
	deadline = time.Now().Add(30 * time.Second)
	for b.st.readers() > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if res.reached == 0 {
		return res, fmt.Errorf("no client connected (%d failed)", failed)
	}
	k := float64(res.reached)
	res.rssBeforeKB, res.rssAfterKB = rss0, rss1
	res.perClientKB = float64(rss1-rss0) / k
	res.heapKB = (float64(ms1.HeapInuse) - float64(ms0.HeapInuse)) / 1024 / k
	res.stackKB = (float64(ms1.StackInuse) - float64(ms0.StackInuse)) / 1024 / k
	res.goroutines = float64(g1-g0) / k
	res.childKB = float64(childRSS) / k
	if failed > 0 {
		b.res.notes = append(b.res.notes, fmt.Sprintf("memory: %d of %d clients could not connect", failed, n))
	}
	return res, nil
}

// memChild is the client process of the memory phase: it attaches n SSE
// (or WebSocket, or SSE over HTTP/2) clients round-robin to the given
// stream URLs, prints "ready <connected> <failed> <VmRSS kB> <connections
// dialed>", and holds them until its stdin closes.
func memChild(o options) error {
	raiseNoFile()
	urls := strings.Split(o.memChildURLs, ",")
	if o.memChildN < 1 || len(urls) == 0 || urls[0] == "" {
		return fmt.Errorf("--mem-child needs --mem-child-n and --mem-child-urls")
	}
	var dials atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
	}
	tr := &http.Transport{
		DialContext:           dial,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
		ReadBufferSize:        1 << 10,
		WriteBufferSize:       1 << 10,
	}
	h2 := o.memChildTransport == "h2"
	if h2 {
		// HTTP/2 over TLS trusting the bench's certificate: the readers
		// share connections, up to the server's concurrent streams each.
		der, err := base64.StdEncoding.DecodeString(o.memChildCA)
		if err != nil {
			return fmt.Errorf("--mem-child-ca: %w", err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("--mem-child-ca: %w", err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		tr.ForceAttemptHTTP2 = true
	}
	hc := &http.Client{Transport: tr}
	ws := &websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1 << 10, WriteBufferSize: 1 << 10,
		NetDialContext: dial}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the parent closes stdin to end this process
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	connecting := 64 // bounded connect concurrency (the listen backlog)
	if h2 {
		// One at a time: a request that finds every connection full (or
		// none yet) dials a new one, so concurrent ones would each dial
		// theirs; one by one, each connection takes the server's
		// concurrent streams before the next is dialed.
		connecting = 1
	}
	sem := make(chan struct{}, connecting)
	var connected, failed atomic.Int64
	var attached sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	var firstErr atomic.Pointer[error]
	for i := range o.memChildN {
		if time.Now().After(deadline) || ctx.Err() != nil {
			failed.Add(int64(o.memChildN - i))
			break
		}
		sem <- struct{}{}
		attached.Add(1)
		if o.memChildTransport == "websocket" {
			go func() {
				conn, resp, err := ws.DialContext(ctx, "ws"+strings.TrimPrefix(urls[i%len(urls)], "http"), nil)
				<-sem
				if resp != nil {
					resp.Body.Close()
				}
				if err != nil {
					if resp != nil {
						err = fmt.Errorf("%w (status %d)", err, resp.StatusCode)
					}
					firstErr.CompareAndSwap(nil, &err)
					failed.Add(1)
					attached.Done()
					return
				}
				connected.Add(1)
				attached.Done()
				for {
					if _, _, err := conn.NextReader(); err != nil {
						break
					}
				}
				conn.Close()
			}()
			continue
		}
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[i%len(urls)], nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := hc.Do(req)
			<-sem
			if err == nil && resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			if err == nil && h2 && resp.ProtoMajor != 2 {
				resp.Body.Close()
				err = fmt.Errorf("%s, not HTTP/2", resp.Proto)
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
				failed.Add(1)
				attached.Done()
				return
			}
			connected.Add(1)
			attached.Done()
			buf := make([]byte, 512)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
		}()
	}
	attached.Wait()
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(os.Stderr, "reprise-bench (client process): %d clients failed, first: %v\n", failed.Load(), *e)
	}
	fmt.Printf("ready %d %d %d %d\n", connected.Load(), failed.Load(), rssKB(), dials.Load())
	<-ctx.Done()
	return nil
}

// heapProfile writes the live heap to --profile-dir (compare two with
// go tool pprof -diff_base).
func (b *bench) heapProfile(name string) {
	if b.o.profileDir == "" {
		return
	}
	if f, err := os.Create(filepath.Join(b.o.profileDir, name+".heap")); err == nil {
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
}
