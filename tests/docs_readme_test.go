package tests

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/stream"
)

// TestReadmeCurlWalkthrough runs the README's curl walkthrough as written
// (bash and curl, against a proxy on its own port instead of :8080): the
// events it prints before dropping the stream and the ones the resume
// after the last id it printed sends are the whole stream, each once, and
// the model generated once.
func TestReadmeCurlWalkthrough(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile(filepath.Join(composeRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)## Try it with curl[^\n]*\n+```sh\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md: no ```sh block under \"## Try it with curl\"")
	}
	// The proxy's heartbeat is reprise's default (15 s), as `go run
	// ./cmd/reprise` has it: the test env's 500 ms put a ": ping" comment
	// among the events on a loaded box, where the walkthrough's `head -n
	// 16` counts lines of events only.
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.Heartbeat = stream.DefaultHeartbeat }))
	u, _ := url.Parse(e.URL)
	var script []string
	for line := range strings.Lines(string(block[1])) {
		if strings.HasPrefix(line, "go run ./cmd/reprise") {
			continue // the env is the proxy
		}
		script = append(script, strings.ReplaceAll(line, "localhost:8080", u.Host))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e")
	cmd.Stdin = strings.NewReader(strings.Join(script, ""))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	seen := parseSSE(stderr.String()) // what head let through, shown by tee
	out := stdout.String()
	last, rest, _ := strings.Cut(out, "\n")
	resumed := parseSSE(rest)
	if len(seen) != 5 || seen[4].ID != last {
		t.Fatalf("before the drop it printed %d events %+v and kept %q; want 5 and their last id", len(seen), seen, last)
	}
	all := append(seen, resumed...)
	checkUnique(t, all)
	if len(all) != 43 || all[len(all)-1].Data != "[DONE]" {
		t.Fatalf("the walkthrough got %d events in all, ending %+v; want 43 ending with [DONE]", len(all), all[len(all)-1])
	}
	if !strings.Contains(out, `{"key":"demo-1"`) {
		t.Errorf("no status JSON in %q", out)
	}
	const prompt = "hello [tokens=40]"
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 {
		t.Errorf("%d generations, want 1", len(gens))
	}
}

// parseSSE reads the events of an SSE text: id and data lines, a blank
// line after each, comments (": ping") skipped; a line that is none of
// these ends it.
func parseSSE(s string) []event {
	var evs []event
	var cur event
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			cur.Data = line[len("data: "):]
		case strings.HasPrefix(line, "retry: "), strings.HasPrefix(line, ":"): // the first event's reconnection time; a comment
		case line == "" && cur != (event{}):
			evs = append(evs, cur)
			cur = event{}
		case line != "":
			return evs
		}
	}
	if cur != (event{}) {
		evs = append(evs, cur) // the last one head cut before its blank line
	}
	return evs
}
