package cost

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
)

// ErrInvalidPrices is returned by Load and New for a price table that
// cannot be used: unreadable JSON, an unknown field (a misspelt price), a
// negative or non-finite price, or an empty model name.
var ErrInvalidPrices = errors.New("cost: invalid price table")

// Price is what one model costs, in the table's currency (USD in the
// examples): per million prompt (input) and completion (output) tokens,
// and per call. A generation costs its usage at the token prices plus the
// call price.
type Price struct {
	// InputPer1M is the price of a million prompt tokens. Default 0.
	InputPer1M float64 `json:"input_per_1m"`
	// OutputPer1M is the price of a million completion tokens. Default 0.
	OutputPer1M float64 `json:"output_per_1m"`
	// PerCall is the price of one generation, whatever its usage. Default 0.
	PerCall float64 `json:"per_call"`
}

// tokens reports whether p prices tokens (and so needs the usage).
func (p Price) tokens() bool { return p.InputPer1M != 0 || p.OutputPer1M != 0 }

// Table maps model names to prices. A name ending in * matches every model
// it prefixes; an exact name wins over a pattern, a longer pattern over a
// shorter one. The zero Table knows no price. Set replaces its prices in
// place, so that everything holding it prices by the new ones.
type Table struct {
	mu       sync.RWMutex
	exact    map[string]Price
	patterns []pattern // longest prefix first
}

type pattern struct {
	name, prefix string
	price        Price
}

// New returns the table of prices, keyed by model name or pattern.
func New(prices map[string]Price) (*Table, error) {
	t := &Table{exact: map[string]Price{}}
	for name, p := range prices {
		if name == "" {
			return nil, fmt.Errorf("%w: an empty model name", ErrInvalidPrices)
		}
		for _, v := range []float64{p.InputPer1M, p.OutputPer1M, p.PerCall} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: model %q: prices must be finite and not negative", ErrInvalidPrices, name)
			}
		}
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			t.patterns = append(t.patterns, pattern{name: name, prefix: prefix, price: p})
			continue
		}
		t.exact[name] = p
	}
	sort.Slice(t.patterns, func(i, j int) bool { return len(t.patterns[i].prefix) > len(t.patterns[j].prefix) })
	return t, nil
}

// Load reads a price table from a JSON file: an object of model names (or
// patterns) to prices, e.g.
//
//	{"gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.6},
//	 "claude-*": {"input_per_1m": 3, "output_per_1m": 15},
//	 "tts-1": {"per_call": 0.002}}
func Load(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var prices map[string]Price
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a misspelt price would silently be 0
	if err := dec.Decode(&prices); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrInvalidPrices, path, lineAt(b, syntax.Offset), err)
		case errors.As(err, &typ):
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrInvalidPrices, path, lineAt(b, typ.Offset), err)
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if i := bytes.Index(b, []byte(field)); i >= 0 { // the field as written, quoted
				return nil, fmt.Errorf("%w: %s:%d: %w", ErrInvalidPrices, path, lineAt(b, int64(i)), err)
			}
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidPrices, path, err)
	}
	return New(prices)
}

// Lookup returns the price of model and the table entry that gives it (the
// model's name or the pattern it matched: a label of bounded cardinality).
func (t *Table) Lookup(model string) (p Price, entry string, ok bool) {
	if t == nil || model == "" {
		return Price{}, "", false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p, ok := t.exact[model]; ok {
		return p, model, true
	}
	for _, pt := range t.patterns {
		if strings.HasPrefix(model, pt.prefix) {
			return pt.price, pt.name, true
		}
	}
	return Price{}, "", false
}

// Cost is what a generation of model with usage u (nil: unknown) cost,
// and the table entry that priced it. ok is false when no price is known:
// the model is not in the table, or it is priced by the token and the
// usage is unknown.
func (t *Table) Cost(model string, u *Usage) (cost float64, entry string, ok bool) {
	p, entry, ok := t.Lookup(model)
	if !ok {
		return 0, "", false
	}
	if cost, ok = p.Cost(u); !ok {
		return 0, "", false
	}
	return cost, entry, true
}

// Cost is what a generation of usage u (nil: unknown) costs at p: its
// usage at the token prices plus the call price. ok is false when p prices
// tokens and the usage is unknown.
func (p Price) Cost(u *Usage) (cost float64, ok bool) {
	if u == nil && p.tokens() {
		return 0, false
	}
	cost = p.PerCall
	if u != nil {
		cost += float64(u.PromptTokens)*p.InputPer1M/1e6 + float64(u.CompletionTokens)*p.OutputPer1M/1e6
	}
	return cost, true
}

// Set replaces t's prices with from's (Lookup and Cost price by them from
// then on).
func (t *Table) Set(from *Table) {
	entries := from.Entries()
	n, _ := New(entries) // from's entries are valid
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exact, t.patterns = n.exact, n.patterns
}

// Entries returns t's prices by model name or pattern, a copy.
func (t *Table) Entries() map[string]Price {
	out := map[string]Price{}
	if t == nil {
		return out
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for name, p := range t.exact {
		out[name] = p
	}
	for _, pt := range t.patterns {
		out[pt.name] = pt.price
	}
	return out
}

// lineAt is the 1-based line of b's byte offset.
func lineAt(b []byte, offset int64) int {
	offset = min(max(offset, 0), int64(len(b)))
	return bytes.Count(b[:offset], []byte("\n")) + 1
}
