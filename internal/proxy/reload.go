package proxy

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
)

// upstreams makes the engine's upstreams of routes. An upstream keeps its
// call policy (its breaker, its retry budget) by name across reloads.
func (p *Proxy) upstreams(routes []Route) ([]engine.Upstream, error) {
	cfg := p.cfg
	var ups []engine.Upstream
	for _, rt := range routes {
		if rt.URL == nil {
			return nil, fmt.Errorf("%w: route %q has no URL", ErrInvalidOption, rt.Name)
		}
		name := cmp.Or(rt.Name, rt.URL.Host) // the engine's default name
		policy := p.policies[name]
		if policy == nil {
			pcfg := cfg.Policy
			um := p.metrics.Upstream(name)
			pcfg.Observer = um
			var err error
			if policy, err = classify.New(pcfg, cfg.Client); err != nil {
				return nil, err
			}
			um.Watch(policy)
		}
		dec := p.auth
		if rt.Key != "" {
			dec = dec.WithUpstreamKey(rt.Key)
		}
		if rt.KeyHeader != "" {
			var err error
			if dec, err = dec.WithUpstreamHeader(rt.KeyHeader); err != nil {
				return nil, fmt.Errorf("route %q: %w", rt.Name, err)
			}
		}
		ups = append(ups, engine.Upstream{Name: rt.Name, URL: rt.URL, Policy: policy, Decorator: dec, Idempotency: cfg.UpstreamIdempotency,
			Background: cfg.UpstreamBackground, Transport: cfg.Client.Transport, Paths: rt.Paths, Models: rt.Models})
	}
	for _, up := range ups {
		p.policies[cmp.Or(up.Name, up.URL.Host)] = up.Policy
	}
	return ups, nil
}

// keySpender is the engine's KeySpender: each generation's cost counts to
// its key's spend and to reprise_key_cost_total.
type keySpender struct{ p *Proxy }

func (k keySpender) KeySpent(tenantHash string, c float64) {
	name := k.p.auth.NameOf(tenantHash)
	if name == "" {
		return // no proxy key in force: nothing to hold to a budget
	}
	k.p.keySpend.KeySpent(tenantHash, c)
	k.p.metrics.KeyCost(k.p.auth.Label(name), c)
}

// keyGauges sets reprise_key_budget and reprise_key_budget_spent of every
// key with a budget.
func (p *Proxy) keyGauges() {
	if p.keySpend == nil {
		return
	}
	for _, k := range p.auth.Keys() {
		if !k.Budget.IsZero() {
			p.metrics.KeyBudget(k.Name, string(k.Budget.Period), k.Budget.Limit, p.keySpend.Spent(k.Hash(), k.Budget.Period))
		}
	}
}

// Reload is a new configuration for Proxy.Reload; a nil field keeps what
// is in force.
type Reload struct {
	// Keys replace the proxy keys (auth.Config.Keys; static auth).
	Keys []auth.Key
	// Routes replace the upstreams (Config.Routes).
	Routes []Route
	// Prices replace the price table; only a proxy started with one
	// (Config.Prices) takes another.
	Prices *cost.Table
}

// Reload puts r in force without a restart: new requests are served by it,
// running generations and their readers go on untouched. All of r is
// checked before any of it is applied: on an error nothing changed. It
// returns what changed, one line each (keys added, removed and changed by
// name, routes, prices), which it also logs.
func (p *Proxy) Reload(ctx context.Context, r Reload) ([]string, error) {
	p.reload.Lock()
	defer p.reload.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.Prices != nil && p.cfg.Prices == nil {
		return nil, fmt.Errorf("%w: prices can be reloaded only when the proxy started with a price table", ErrInvalidOption)
	}
	if r.Keys != nil {
		if err := p.auth.CheckKeys(r.Keys); err != nil {
			return nil, err
		}
	}
	var ups []engine.Upstream
	if r.Routes != nil {
		if len(r.Routes) == 0 {
			return nil, fmt.Errorf("%w: no upstream", ErrInvalidOption)
		}
		kept := maps.Clone(p.policies)
		var err error
		if ups, err = p.upstreams(r.Routes); err != nil {
			p.policies = kept
			return nil, err
		}
		if err := p.engine.CheckUpstreams(ups); err != nil {
			p.policies = kept
			return nil, err
		}
	}
	var changed []string
	if r.Keys != nil {
		before := p.auth.Keys()
		if err := p.auth.SetKeys(r.Keys); err != nil { // checked above: cannot fail
			return nil, err
		}
		changed = append(changed, keyChanges(before, p.auth.Keys())...)
		for _, k := range before {
			if p.auth.Label(k.Name) == auth.Other {
				p.metrics.ForgetKey(k.Name)
			}
		}
		p.keyGauges()
	}
	if ups != nil {
		before := p.engine.Upstreams()
		if err := p.engine.SetUpstreams(ups); err != nil { // checked above: cannot fail
			return nil, err
		}
		if was, is := routeList(before), routeList(p.engine.Upstreams()); was != is {
			changed = append(changed, "routes: "+is+" (were "+was+")")
		}
	}
	if r.Prices != nil {
		before := p.cfg.Prices.Entries()
		p.cfg.Prices.Set(r.Prices)
		changed = append(changed, priceChanges(before, p.cfg.Prices.Entries())...)
	}
	if len(changed) == 0 {
		p.log.Info("reload: nothing changed")
	}
	for _, c := range changed {
		p.log.Info("reload: " + c)
	}
	return changed, nil
}

func keyChanges(before, after []auth.Key) []string {
	was := map[string]auth.Key{}
	for _, k := range before {
		was[k.Name] = k
	}
	var added, removed, changed []string
	for _, k := range after {
		old, ok := was[k.Name]
		delete(was, k.Name)
		switch {
		case !ok:
			added = append(added, k.Name)
		case old.Hash() != k.Hash() || old.Budget != k.Budget || !slices.Equal(old.Models, k.Models) || !slices.Equal(old.Paths, k.Paths):
			changed = append(changed, k.Name)
		}
	}
	for name := range was {
		removed = append(removed, name)
	}
	slices.Sort(removed)
	var out []string
	for _, c := range []struct {
		what  string
		names []string
	}{{"proxy keys added", added}, {"proxy keys removed", removed}, {"proxy keys changed", changed}} {
		if len(c.names) > 0 {
			out = append(out, c.what+": "+strings.Join(c.names, ", "))
		}
	}
	return out
}

func routeList(ups []engine.Upstream) string {
	var s []string
	for _, u := range ups {
		r := u.Name + "=" + u.URL.Redacted()
		if len(u.Paths) > 0 {
			r += " paths=" + strings.Join(u.Paths, ",")
		}
		if len(u.Models) > 0 {
			r += " models=" + strings.Join(u.Models, ",")
		}
		s = append(s, r)
	}
	return strings.Join(s, "; ")
}

func priceChanges(before, after map[string]cost.Price) []string {
	var added, removed, changed []string
	for name, p := range after {
		old, ok := before[name]
		switch {
		case !ok:
			added = append(added, name)
		case old != p:
			changed = append(changed, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			removed = append(removed, name)
		}
	}
	var out []string
	for _, c := range []struct {
		what  string
		names []string
	}{{"prices added", added}, {"prices removed", removed}, {"prices changed", changed}} {
		if len(c.names) > 0 {
			slices.Sort(c.names)
			out = append(out, c.what+": "+strings.Join(c.names, ", "))
		}
	}
	return out
}
