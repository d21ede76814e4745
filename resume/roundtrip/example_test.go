package roundtrip_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"

	"github.com/reprise-dev/reprise/resume/roundtrip"
)

// A client whose streams resume by themselves through reprise: the body reads
// every event once, whatever the network dropped. An SDK takes the same
// *http.Client (openai-go's and anthropic-sdk-go's option.WithHTTPClient).
func Example() {
	client := &http.Client{Transport: &roundtrip.Transport{}}
	req, err := http.NewRequest(http.MethodPost, "http://localhost:8080/v1/chat/completions", strings.NewReader(
		`{"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "Say hello"}]}`))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-...")
	res, err := client.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			fmt.Println(data)
		}
	}
	if err := lines.Err(); err != nil {
		fmt.Println("error:", err)
	}
}
