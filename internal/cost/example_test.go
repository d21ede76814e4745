package cost_test

import (
	"fmt"

	"github.com/reprise-dev/reprise/internal/cost"
)

func ExampleTable_Cost() {
	tab, _ := cost.New(map[string]cost.Price{"gpt-4o*": {InputPer1M: 2.5, OutputPer1M: 10}})
	c, entry, ok := tab.Cost("gpt-4o-mini", &cost.Usage{PromptTokens: 1000, CompletionTokens: 200})
	fmt.Printf("%.4f %s %v\n", c, entry, ok)
	_, _, ok = tab.Cost("claude-sonnet-4", &cost.Usage{PromptTokens: 1000})
	fmt.Println(ok)
	// Output:
	// 0.0045 gpt-4o* true
	// false
}
