package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/reprise-dev/reprise/internal/cost"
)

// ErrInvalidKeys wraps every error ParseKeys and SetKeys return.
var ErrInvalidKeys = errors.New("proxy keys")

// ErrPathNotAllowed is returned by Caller in Static mode for a path the
// caller's key may not call (Key.Paths).
var ErrPathNotAllowed = errors.New("auth: path not allowed for this API key")

// Key strength: what ParseKeys accepts of a key in a proxy keys file. A key
// is guessed by trying; one this short or this plain is found early.
const (
	// MinKeyLength is the fewest characters a key has.
	MinKeyLength = 16
	// MinKeyDistinct is the fewest different characters a key has.
	MinKeyDistinct = 8
)

// Other is the metrics label of a caller that presented no configured key.
const Other = "other"

// Key is one proxy key of Static mode and what it may do.
type Key struct {
	// Name names the key in logs, the status, the attempt log and metrics
	// (never the key itself). Default: a label derived from the key
	// (DerivedName).
	Name string
	// Value is what callers present. Required.
	Value string
	// Budget is the most the key's generations may cost per window; over
	// it, new generations are refused (429 budget_exceeded). Default none.
	Budget cost.Budget
	// Models are the models the key may ask for: * matches any run of
	// characters. Default: every model.
	Models []string
	// Paths are the path prefixes the key may call. Default: every path.
	Paths []string
	// Line is the key's line in its file (0: not from a file).
	Line int

	hash string // resume.TenantHash of its tenant, as SetKeys found it
}

// Hash is the resume.TenantHash of the key's tenant (what records and the
// spend ledger keep of it), for a Key Auth.Keys returned; "" otherwise.
func (k Key) Hash() string { return k.hash }

// Caller is who sent a request: its tenant and, in Static mode, the proxy
// key it presented.
type Caller struct {
	// Tenant is the tenant id (Auth.Tenant).
	Tenant string
	// Name is the proxy key's name; "" outside Static mode.
	Name string
	// Budget is the key's budget (zero: none).
	Budget cost.Budget
	// Models the key may ask for (none: every model).
	Models []string
}

// AllowsModel reports whether c may ask for model. A request that names no
// model is allowed: the restriction is on what it names.
func (c Caller) AllowsModel(model string) bool {
	if len(c.Models) == 0 || model == "" {
		return true
	}
	for _, g := range c.Models {
		if Glob(g, model) {
			return true
		}
	}
	return false
}

// Glob reports whether s matches pattern, where * matches any run of
// characters (a / too) and every other character itself.
func Glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// keySet is one configuration of the proxy keys.
type keySet struct {
	byTenant map[string]*Key // tenant id → key
	byHash   map[string]*Key // TenantHash of its tenant → key
	names    map[string]*Key // name → key
}

// keyring holds the proxy keys in force; every copy of an Auth shares it,
// so a reload reaches each upstream's.
type keyring struct{ set atomic.Pointer[keySet] }

// DerivedName is the name of a key given without one: "key-" and the first
// six hex digits of its tenant id — stable, and short of revealing it.
func (a *Auth) DerivedName(value string) string { return "key-" + a.TenantOf(value)[:6] }

// tenantHash is resume.TenantHash: what records and the spend ledger keep
// of a tenant id.
func tenantHash(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(h[:8])
}

// SetKeys replaces the proxy keys in force with keys (names defaulted by
// DerivedName), or returns an error wrapping ErrInvalidKeys and keeps the
// ones in force: a duplicate name or key, or no key in Static mode.
// Requests already admitted are not affected.
func (a *Auth) SetKeys(keys []Key) error {
	set, err := a.build(keys)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidKeys, err.at(""))
	}
	a.keys.set.Store(set)
	return nil
}

// CheckKeys reports whether SetKeys would take keys.
func (a *Auth) CheckKeys(keys []Key) error {
	if _, err := a.build(keys); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidKeys, err.at(""))
	}
	return nil
}

// keyError is why a configuration of keys is refused, at its line.
type keyError struct {
	line int
	msg  string
}

// at is e prefixed by file:line (file "": "line N: "; no line: nothing).
func (e *keyError) at(file string) string {
	switch {
	case e.line == 0 && file == "":
		return e.msg
	case e.line == 0:
		return file + ": " + e.msg
	case file == "":
		return fmt.Sprintf("line %d: %s", e.line, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s", file, e.line, e.msg)
}

func (a *Auth) build(keys []Key) (*keySet, *keyError) {
	set := &keySet{byTenant: map[string]*Key{}, byHash: map[string]*Key{}, names: map[string]*Key{}}
	for _, k := range keys {
		if k.Value == "" {
			return nil, &keyError{k.Line, "an empty key"}
		}
		if k.Name == "" {
			k.Name = a.DerivedName(k.Value)
		}
		t := a.TenantOf(k.Value)
		if prev, dup := set.byTenant[t]; dup {
			return nil, &keyError{k.Line, fmt.Sprintf("the key of %q again (first %s)", prev.Name, where(prev.Line))}
		}
		if prev, dup := set.names[k.Name]; dup {
			return nil, &keyError{k.Line, fmt.Sprintf("the name %q again (first %s)", k.Name, where(prev.Line))}
		}
		k.hash = tenantHash(t)
		set.byTenant[t], set.byHash[k.hash], set.names[k.Name] = &k, &k, &k
	}
	if a.cfg.Mode == Static && len(keys) == 0 {
		return nil, &keyError{0, "auth static needs proxy keys"}
	}
	return set, nil
}

func where(line int) string {
	if line == 0 {
		return "given before"
	}
	return fmt.Sprintf("on line %d", line)
}

// Keys returns the proxy keys in force, by name.
func (a *Auth) Keys() []Key {
	set := a.keys.set.Load()
	if set == nil {
		return nil
	}
	out := make([]Key, 0, len(set.names))
	for _, k := range set.names {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(x, y Key) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// NameOf returns the name of the proxy key whose tenant's TenantHash is
// hash ("" for none in force).
func (a *Auth) NameOf(hash string) string {
	if set := a.keys.set.Load(); set != nil {
		if k := set.byHash[hash]; k != nil {
			return k.Name
		}
	}
	return ""
}

// Label is name as a metrics label: a name of the keys in force, else
// Other — a bounded set.
func (a *Auth) Label(name string) string {
	if set := a.keys.set.Load(); set != nil && name != "" {
		if _, ok := set.names[name]; ok {
			return name
		}
	}
	return Other
}

// Caller returns who sent r: its tenant and, in Static mode, its key's
// name and limits; ErrNoKey or ErrBadKey when Static mode refuses it,
// ErrPathNotAllowed for a path its key may not call (reprise's own reads,
// /v1/streams/, are every key's).
func (a *Auth) Caller(r *http.Request) (Caller, error) {
	switch a.cfg.Mode {
	case None:
		return Caller{Tenant: Anonymous}, nil
	case Static:
		c := a.credential(r)
		if c == "" {
			return Caller{}, ErrNoKey
		}
		t := a.TenantOf(c)
		var k *Key
		if set := a.keys.set.Load(); set != nil {
			k = set.byTenant[t]
		}
		if k == nil {
			return Caller{}, ErrBadKey
		}
		if len(k.Paths) > 0 && !strings.HasPrefix(r.URL.Path, "/v1/streams/") && !slices.ContainsFunc(k.Paths, func(p string) bool {
			return strings.HasPrefix(r.URL.Path, p)
		}) {
			return Caller{}, ErrPathNotAllowed
		}
		return Caller{Tenant: t, Name: k.Name, Budget: k.Budget, Models: k.Models}, nil
	}
	if c := a.credential(r); c != "" {
		return Caller{Tenant: a.TenantOf(c)}, nil
	}
	return Caller{Tenant: Anonymous}, nil
}

// ParseKeys reads the text of a proxy keys file, named file in errors: one
// key a line, either the key alone or
//
//	NAME KEY [budget=USD/PERIOD] [models=GLOB,…] [paths=PATH,…]
//
// (# starts a comment, blank lines are skipped). It refuses, with the file
// and line, a key shorter than MinKeyLength, with fewer than
// MinKeyDistinct different characters or of one class of characters only
// (lower case letters, upper case letters, digits, others), a name that is
// not 1-64 letters, digits, '.', '_' or '-', an unknown or repeated
// setting, and a duplicate name or key (SetKeys).
func ParseKeys(file, text string) ([]Key, error) {
	var keys []Key
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
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrInvalidKeys, file, n, fmt.Sprintf(format, args...))
		}
		k := Key{Value: f[0], Line: n}
		if len(f) > 1 {
			k.Name, k.Value = f[0], f[1]
			if !validName(k.Name) {
				return nil, bad("the name %q: want 1-64 letters, digits, '.', '_' or '-'", k.Name)
			}
		}
		if why := weak(k.Value); why != "" {
			return nil, bad("the key %s", why)
		}
		seen := map[string]bool{}
		for _, opt := range f[min(2, len(f)):] {
			name, value, _ := strings.Cut(opt, "=")
			if seen[name] {
				return nil, bad("%s= given twice", name)
			}
			seen[name] = true
			switch name {
			case "budget":
				b, err := cost.ParseBudget(value)
				if err != nil {
					return nil, bad("%v", err)
				}
				k.Budget = b
			case "models":
				if k.Models = list(value); k.Models == nil {
					return nil, bad("models= names no model")
				}
			case "paths":
				if k.Paths = list(value); k.Paths == nil {
					return nil, bad("paths= names no path")
				}
				for _, p := range k.Paths {
					if !strings.HasPrefix(p, "/") {
						return nil, bad("paths=: %q does not start with /", p)
					}
				}
			default:
				return nil, bad("unknown setting %q (budget=, models=, paths=)", name)
			}
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", ErrInvalidKeys, file)
	}
	// Duplicates, by the names and keys SetKeys would see: checked with a
	// throwaway secret, as only equality matters.
	probe := &Auth{cfg: Config{Secret: []byte("reprise-duplicate-check")}, keys: &keyring{}}
	if _, err := probe.build(keys); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidKeys, err.at(file))
	}
	return keys, nil
}

// list is a comma-separated value without empty items; nil when none.
func list(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		ascii := r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))
		if !ascii && r != '.' && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// weak says why key is too easily guessed ("" when it is not).
func weak(key string) string {
	if len(key) < MinKeyLength {
		return fmt.Sprintf("is %d characters long; want at least %d", len(key), MinKeyLength)
	}
	distinct := map[rune]bool{}
	classes := map[int]bool{}
	for _, r := range key {
		distinct[r] = true
		switch {
		case unicode.IsLower(r):
			classes[0] = true
		case unicode.IsUpper(r):
			classes[1] = true
		case unicode.IsDigit(r):
			classes[2] = true
		default:
			classes[3] = true
		}
	}
	if len(distinct) < MinKeyDistinct {
		return fmt.Sprintf("has %d different characters; want at least %d", len(distinct), MinKeyDistinct)
	}
	if len(classes) < 2 {
		return "is of one class of characters only (lower case, upper case, digits or others); mix at least two"
	}
	return ""
}
