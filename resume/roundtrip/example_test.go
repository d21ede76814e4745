package roundtrip_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/resume/roundtrip"
)

// An openai-go client whose streams resume by themselves through reprise:
// the SDK reads every event once, whatever the network dropped.
func Example() {
	httpClient := &http.Client{Transport: &roundtrip.Transport{}}
	client := openai.NewClient(
		option.WithBaseURL("http://localhost:8080/v1/"),
		option.WithAPIKey("sk-..."),
		option.WithHTTPClient(httpClient),
	)
	s := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
	})
	for s.Next() {
		if c := s.Current(); len(c.Choices) > 0 {
			fmt.Print(c.Choices[0].Delta.Content)
		}
	}
	if err := s.Err(); err != nil {
		fmt.Println("error:", err)
	}
}
