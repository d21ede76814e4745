package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/proxy"
)

// reloadOnHangup reloads the files the configuration names — --proxy-keys,
// --upstreams, --prices — into p at each SIGHUP, until the returned stop
// is called. A file that does not read is refused with its line and
// nothing changes; the log says what changed.
func reloadOnHangup(cfg config, p *proxy.Proxy, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-hup:
				log.Info("SIGHUP: reloading the proxy keys, upstreams and prices")
				if err := reload(cfg, p); err != nil {
					log.Error("reload refused: the configuration in force stays", "err", err)
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-finished
	}
}

// reload reads the configuration's files and puts them in force in p.
func reload(cfg config, p *proxy.Proxy) error {
	var r proxy.Reload
	var err error
	if cfg.proxyKeys != "" {
		if r.Keys, err = readKeys(cfg.proxyKeys); err != nil {
			return err
		}
	}
	if cfg.upstreams != "" {
		if r.Routes, err = readRoutes(cfg.upstreams, os.Getenv); err != nil {
			return err
		}
	}
	if cfg.prices != "" {
		if r.Prices, err = cost.Load(cfg.prices); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = p.Reload(ctx, r)
	return err
}
