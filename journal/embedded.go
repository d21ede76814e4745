package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrStoreInUse is returned by StartEmbedded when another server (in this
// process or another) holds the store directory: two servers on one file
// store each keep their own index of it, so one would not see what the
// other stored and both would overwrite it.
var ErrStoreInUse = errors.New("journal: the store directory is in use by another server")

// lockFile is the file in the store directory whose lock (flock(2), held
// until Shutdown; released by the kernel if the process dies) says the
// directory has an owner. nats-server itself takes no such lock.
const lockFile = "reprise.lock"

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
	// MaxStore caps the bytes JetStream stores on disk; past it writes are
	// refused (ErrStoreFull). Default 0: NATS's own, three quarters of the
	// volume's free space when it starts.
	MaxStore int64
}

// Embedded is an in-process nats-server with JetStream.
type Embedded struct {
	Server *server.Server
	lock   *flock.Flock
}

// StartEmbedded starts a nats-server with JetStream and waits until it
// accepts connections. It owns cfg.Dir until Shutdown: a second
// StartEmbedded on it fails with ErrStoreInUse.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: embedded nats needs a directory", ErrInvalidOption)
	}
	lock, err := lockStore(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s, err := startServer(cfg)
	if err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	return &Embedded{Server: s, lock: lock}, nil
}

// lockStore takes dir's lock file, or fails with ErrStoreInUse.
func lockStore(dir string) (*flock.Flock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: embedded nats: %w", err)
	}
	lock := flock.New(filepath.Join(dir, lockFile))
	ok, err := lock.TryLock()
	switch {
	case err != nil:
		return nil, fmt.Errorf("journal: embedded nats: locking %s: %w", lock.Path(), err)
	case !ok:
		return nil, fmt.Errorf("%w: %s is locked", ErrStoreInUse, lock.Path())
	}
	return lock, nil
}

func startServer(cfg EmbeddedConfig) (*server.Server, error) {
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
		// JetStreamMaxStore 0 lets NATS size it; it takes a negative for
		// "unlimited", which reprise does not offer.
		JetStreamMaxStore: cfg.MaxStore,
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
	if !s.ReadyForConnections(startTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("journal: embedded nats did not start within %s", startTimeout)
	}
	return s, nil
}

// startTimeout bounds an embedded server's start. A clustered node on a
// busy machine took over 10 s (a test's third node, beside the suite's
// other packages on 2 cores).
const startTimeout = 30 * time.Second

// Connect opens a client connection to the embedded server.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.InProcessServer(e.Server)}, ConnectOptions()...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("journal: connect embedded: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server, waits for it, and gives up the store
// directory. It is idempotent.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	if e.lock != nil {
		_ = e.lock.Unlock()
	}
}
