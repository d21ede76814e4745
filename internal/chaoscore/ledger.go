package chaoscore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// A Ledger is the fake upstream's account of what a prompt made it generate.
type Ledger interface {
	// Settled returns prompt's generations in start order once none of them
	// is still running (a generation cut before its answer head may still
	// be reaching the upstream when the client gives up on it).
	Settled(ctx context.Context, prompt string) ([]mockllm.Generation, error)
}

// LocalLedger is the ledger of a fake upstream in this process.
func LocalLedger(l *mockllm.Ledger) Ledger { return localLedger{l} }

type localLedger struct{ l *mockllm.Ledger }

func (ll localLedger) Settled(ctx context.Context, prompt string) ([]mockllm.Generation, error) {
	for {
		gens := ll.l.Generations(prompt)
		if settled(gens) {
			return gens, nil
		}
		if err := ll.l.Wait(ctx, prompt, len(gens)); err != nil {
			return gens, fmt.Errorf("upstream generations not finished: %w", err)
		}
	}
}

// RemoteLedger is the ledger a fake upstream serves at url
// (cmd/mockllm's /ledger), read with c.
func RemoteLedger(c *http.Client, url string) Ledger { return remoteLedger{c, url} }

type remoteLedger struct {
	c   *http.Client
	url string
}

func (rl remoteLedger) Settled(ctx context.Context, prompt string) ([]mockllm.Generation, error) {
	for {
		rep, err := rl.get(ctx, prompt)
		if err != nil || settled(rep.Generations) {
			return rep.Generations, err
		}
		select {
		case <-ctx.Done():
			return rep.Generations, fmt.Errorf("upstream generations not finished: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling another process: it has no event to wait on
		}
	}
}

func (rl remoteLedger) get(ctx context.Context, prompt string) (mockllm.PromptReport, error) {
	var rep mockllm.PromptReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rl.url+"?prompt="+url.QueryEscape(prompt), nil)
	if err != nil {
		return rep, err
	}
	resp, err := rl.c.Do(req)
	if err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("ledger: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	return rep, nil
}

func settled(gens []mockllm.Generation) bool {
	for _, g := range gens {
		if !g.Completed && !g.Aborted {
			return false
		}
	}
	return true
}
