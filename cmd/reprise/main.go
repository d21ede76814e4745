// Command reprise runs the proxy. With no flags it is a complete demo on one
// machine: embedded JetStream under ./data, the built-in demo upstream and
// the page at http://localhost:8080/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeHelp(os.Stdout)
		return
	case errors.Is(err, errVersion):
		info, ok := debug.ReadBuildInfo()
		fmt.Println(versionLine(info, ok, stamped()))
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "reprise:", err)
		os.Exit(2)
	}
	cfg.environ = os.Environ()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if cfg.logFormat == "text" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	}
	if err := run(ctx, cfg, log, nil); err != nil {
		// As a flag error is told: one line, whatever the log's format
		// (run logged a failure after the start too).
		fmt.Fprintln(os.Stderr, "reprise:", err)
		stop()
		os.Exit(1)
	}
}
