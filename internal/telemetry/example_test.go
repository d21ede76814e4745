package telemetry_test

import (
	"context"
	"log"
	"time"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/telemetry"
)

// New reads the environment (OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318
// turns it on); its Telemetry goes into the proxy's config, and is shut down
// after the proxy, which flushes what is left.
func ExampleNew() {
	tel, err := telemetry.New(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx) // nil-safe: no telemetry, nothing to flush
	}()
	cfg := proxy.Config{ /* NATS, Upstream, Auth, … */ }
	if tel != nil { // off: no Tracer
		cfg.Tracer = tel
	}
	_ = cfg
}
