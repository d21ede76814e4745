package journal

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedConfig configures StartEmbedded.
type EmbeddedConfig struct {
	// Dir is the JetStream store directory. Required.
	Dir string
	// Port is the client port; 0 means no listener (in-process only),
	// -1 a random port. Default 0.
	Port int
	// Cluster, when set, configures clustering (tests of the cluster topology).
	Cluster *server.ClusterOpts
	// Routes are the cluster peers' route URLs.
	Routes []string
	// ServerName is the node's name. Default "reprise".
	ServerName string
}

// Embedded is an in-process nats-server with JetStream.
type Embedded struct {
	Server *server.Server
}

// StartEmbedded starts a nats-server with JetStream and waits until it
// accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: embedded nats needs a directory", ErrInvalidOption)
	}
	name := cfg.ServerName
	if name == "" {
		name = "reprise"
	}
	opts := &server.Options{
		ServerName: name,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		NoSigs:     true,
		NoLog:      true,
		Port:       cfg.Port,
		Host:       "127.0.0.1",
		DontListen: cfg.Port == 0,
	}
	if cfg.Cluster != nil {
		opts.Cluster = *cfg.Cluster
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("journal: embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("journal: embedded nats did not start within 10s")
	}
	return &Embedded{Server: s}, nil
}

// Connect opens a client connection to the embedded server.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.InProcessServer(e.Server)}
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("journal: connect embedded: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}
