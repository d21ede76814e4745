package cost_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/reprise-dev/reprise/internal/cost"
)

func TestCost(t *testing.T) {
	tab, err := cost.New(map[string]cost.Price{
		"gpt-4o-mini": {InputPer1M: 0.15, OutputPer1M: 0.6},
		"gpt-*":       {InputPer1M: 2, OutputPer1M: 8},
		"gpt-4*":      {InputPer1M: 5, OutputPer1M: 20},
		"tts-1":       {PerCall: 0.002},
	})
	if err != nil {
		t.Fatal(err)
	}
	u := &cost.Usage{PromptTokens: 1000, CompletionTokens: 500, TotalTokens: 1500}
	tests := []struct {
		name, model string
		usage       *cost.Usage
		want        float64
		entry       string
		ok          bool
	}{
		{name: "exact", model: "gpt-4o-mini", usage: u, want: 1000*0.15/1e6 + 500*0.6/1e6, entry: "gpt-4o-mini", ok: true},
		{name: "longest pattern", model: "gpt-4.1", usage: u, want: 1000*5/1e6 + 500*20/1e6, entry: "gpt-4*", ok: true},
		{name: "shorter pattern", model: "gpt-5", usage: u, want: 1000*2/1e6 + 500*8/1e6, entry: "gpt-*", ok: true},
		{name: "per call without usage", model: "tts-1", want: 0.002, entry: "tts-1", ok: true},
		{name: "tokens without usage", model: "gpt-5"},
		{name: "unknown model", model: "llama", usage: u},
		{name: "no model", usage: u},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, entry, ok := tab.Cost(tt.model, tt.usage)
			if ok != tt.ok || entry != tt.entry || math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Cost = %v %q %v, want %v %q %v", got, entry, ok, tt.want, tt.entry, tt.ok)
			}
		})
	}
	if _, _, ok := (*cost.Table)(nil).Cost("gpt-5", u); ok {
		t.Error("a nil table priced a model")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tab, err := cost.Load(write("ok.json", `{"mock-1": {"input_per_1m": 1, "output_per_1m": 2}, "tts-*": {"per_call": 0.01}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, _, ok := tab.Cost("mock-1", &cost.Usage{PromptTokens: 1e6, CompletionTokens: 1e6}); !ok || c != 3 {
		t.Errorf("mock-1: %v %v, want 3", c, ok)
	}
	for name, body := range map[string]string{
		"syntax":   `{"m": `,
		"misspelt": `{"m": {"input_per_million": 1}}`,
		"negative": `{"m": {"per_call": -1}}`,
		"empty":    `{"": {"per_call": 1}}`,
	} {
		if _, err := cost.Load(write(name+".json", body)); !errors.Is(err, cost.ErrInvalidPrices) {
			t.Errorf("%s: %v, want ErrInvalidPrices", name, err)
		}
	}
}

// TestExampleFile: the documented example loads.
func TestExampleFile(t *testing.T) {
	tab, err := cost.Load("../../docs/prices.example.json")
	if err != nil {
		t.Fatal(err)
	}
	if c, entry, ok := tab.Cost("gpt-4o-2024-08-06", &cost.Usage{PromptTokens: 1e6}); !ok || entry != "gpt-4o*" || c != 2.5 {
		t.Errorf("gpt-4o-2024-08-06: %v %q %v, want 2.5 by gpt-4o*", c, entry, ok)
	}
}
