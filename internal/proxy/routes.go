package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/reprise-dev/reprise/internal/auth"
)

// ErrRoutes wraps every error ParseRoutes returns.
var ErrRoutes = errors.New("upstreams file")

// RouteLine is one upstream of an upstreams file, as written: what
// ParseRoutes reads before the URL is checked and the key read from the
// environment (cmd/reprise's --upstreams makes a Route of it).
type RouteLine struct {
	Line   int    // 1-based, for errors
	Name   string // names the upstream in Reprise-Upstream and the status
	URL    string
	KeyEnv string   // key_env=VAR: the environment variable holding its API key ("" none)
	Auth   string   // auth=bearer|x-api-key|api-key: the header its key is sent in ("" by the API's shape)
	Paths  []string // paths=p1,p2: the path prefixes it serves (none: every path)
	Models []string // models=m1,m2*: the models it serves (none: every model)
}

// ParseRoutes reads the text of an upstreams file: one upstream a line,
// "name url" then key_env=VAR, auth=HEADER, paths=p1,p2 and models=m1,m2*
// as needed;
// # starts a comment, blank lines are skipped. A request goes to the
// routes that serve its path and model, in the file's order. It checks the
// form only: the URL and the environment are the caller's.
func ParseRoutes(text string) ([]RouteLine, error) {
	var routes []RouteLine
	n := 0
	for line := range strings.Lines(text) {
		n++
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%w: line %d: want name url [key_env=VAR] [auth=…] [paths=…] [models=…]", ErrRoutes, n)
		}
		rt := RouteLine{Line: n, Name: f[0], URL: f[1]}
		for _, opt := range f[2:] {
			name, value, _ := strings.Cut(opt, "=")
			switch name {
			case "key_env":
				if value == "" {
					return nil, fmt.Errorf("%w: line %d: key_env names no variable", ErrRoutes, n)
				}
				rt.KeyEnv = value
			case "auth":
				switch value {
				case auth.HeaderBearer, auth.HeaderXAPIKey, auth.HeaderAPIKey:
				default:
					return nil, fmt.Errorf("%w: line %d: auth=%q: want %s, %s or %s", ErrRoutes, n, value, auth.HeaderBearer, auth.HeaderXAPIKey, auth.HeaderAPIKey)
				}
				rt.Auth = value
			case "paths":
				rt.Paths = strings.Split(value, ",")
			case "models":
				rt.Models = strings.Split(value, ",")
			default:
				return nil, fmt.Errorf("%w: line %d: unknown setting %q", ErrRoutes, n, name)
			}
		}
		routes = append(routes, rt)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: no upstream", ErrRoutes)
	}
	return routes, nil
}
