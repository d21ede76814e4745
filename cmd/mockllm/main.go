// Command mockllm runs the fake OpenAI-compatible upstream from
// internal/mockllm as a standalone server, for the demo mode and for manual or
// external checks. It is never part of a proxy path.
//
//	mockllm --listen :9090 --delay 33ms --tokens 64 --readable
//
// Besides the fake endpoints it serves GET /ledger: the ledger's totals and
// per-prompt entries as JSON; GET /ledger?prompt=P gives one prompt's
// generations with their content.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	listen := fs.String("listen", ":9090", "address to listen on")
	delay := fs.Duration("delay", 33*time.Millisecond, "pause between content tokens")
	tokens := fs.Int("tokens", 64, "content tokens per completion when the prompt gives none")
	readable := fs.Bool("readable", true, "generate readable English instead of pseudo-words")
	background := fs.Bool("background", true, "serve OpenAI's background mode on /v1/responses (GET /v1/responses/{id}?stream=true&starting_after=N)")
	verbose := fs.Bool("v", false, "log every request (debug level)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fake := mockllm.New(mockllm.Config{TokenDelay: *delay, Tokens: *tokens, Readable: *readable, Background: *background, Logger: logger})
	mux := http.NewServeMux()
	mux.Handle("/ledger", fake.LedgerHandler())
	mux.Handle("/", fake)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("mockllm listening", "addr", ln.Addr().String(), "delay", *delay, "tokens", *tokens, "readable", *readable)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	logger.Info("mockllm shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Hung or slow streams: close their connections, which also cancels their contexts.
		logger.Warn("mockllm forced close", "error", err)
		_ = srv.Close()
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
