package mockllm_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

func unset() mockllm.Directives {
	return mockllm.Directives{Tokens: -1, Delay: -1, AbortAfter: -1, RetryAfter: -1, RetryAfterMS: -1, HangAfter: -1, ErrorAfter: -1}
}

func TestParseDirectives(t *testing.T) {
	t.Parallel()
	with := func(f func(*mockllm.Directives)) mockllm.Directives {
		d := unset()
		f(&d)
		return d
	}
	tests := []struct {
		prompt string
		want   mockllm.Directives
	}{
		{"plain prompt", unset()},
		{"hello [tokens=50] [delay=5ms]", with(func(d *mockllm.Directives) { d.Tokens, d.Delay = 50, 5*time.Millisecond })},
		{"[abort_after=10] x [hang_after=5] [hang]", with(func(d *mockllm.Directives) { d.AbortAfter, d.HangAfter, d.Hang = 10, 5, true })},
		{"[error_after=3]", with(func(d *mockllm.Directives) { d.ErrorAfter = 3 })},
		{"[status=503,502] [retry_after=1] [retry_after_ms=300]", with(func(d *mockllm.Directives) {
			d.Statuses, d.RetryAfter, d.RetryAfterMS = []int{503, 502}, 1, 300
		})},
		{"[tokens=3 delay=2ms] one bracket, many items", with(func(d *mockllm.Directives) { d.Tokens, d.Delay = 3, 2*time.Millisecond })},
		{"[TOKENS=4] case and [tokens=5] last wins", with(func(d *mockllm.Directives) { d.Tokens = 5 })},
		{"[tokens=-1] [tokens=x] [delay=-5ms] [delay=soon] [nope=1] invalid ignored", unset()},
		{"[tokens=99999999] [delay=10h] capped", with(func(d *mockllm.Directives) { d.Tokens, d.Delay = mockllm.MaxTokens, mockllm.MaxDelay })},
		{"nested [[tokens=2] and unclosed [tokens=9", with(func(d *mockllm.Directives) { d.Tokens = 2 })},
		{"[status=503,oops,200]", with(func(d *mockllm.Directives) { d.Statuses = []int{503, 0, 200} })},
		{"[hang=false]", unset()},
		{"[model=mock-1-2026-12-01]", with(func(d *mockllm.Directives) { d.Model = "mock-1-2026-12-01" })},
	}
	for _, tt := range tests {
		if got := mockllm.ParseDirectives(tt.prompt); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseDirectives(%q) =\n %+v, want\n %+v", tt.prompt, got, tt.want)
		}
	}
}

func TestContentDeterministic(t *testing.T) {
	t.Parallel()
	for _, readable := range []bool{false, true} {
		a := mockllm.Content("same prompt", 30, readable)
		if b := mockllm.Content("same prompt", 30, readable); !slices.Equal(a, b) {
			t.Errorf("readable=%v: not deterministic", readable)
		}
		if b := mockllm.Content("other prompt", 30, readable); slices.Equal(a, b) && !readable {
			t.Errorf("readable=%v: different prompts gave the same content", readable)
		}
		for i, tok := range a {
			if strings.HasPrefix(tok, " ") != (i > 0) || strings.TrimSpace(tok) == "" {
				t.Errorf("readable=%v: token %d = %q", readable, i, tok)
			}
		}
		if got := mockllm.Content("p", 0, readable); len(got) != 0 {
			t.Errorf("zero tokens gave %q", got)
		}
	}
	if a := mockllm.Audio("x", 2); len(a) != 2*mockllm.ChunkBytes || string(a) != string(mockllm.Audio("x", 2)) {
		t.Errorf("Audio not deterministic or wrong size")
	}
}

func FuzzDirectives(f *testing.F) {
	for _, seed := range []string{
		"hello [tokens=50] [delay=5ms] [abort_after=10] [status=503,502] [retry_after=1] [retry_after_ms=300] [hang] [hang_after=5]",
		"[[[]]]", "[tokens=", "[status=,,,]", "[delay=1h2m3s4ms]", "]][[tokens=1]", "[tokens=1\x00]", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		d := mockllm.ParseDirectives(prompt)
		if !reflect.DeepEqual(d, mockllm.ParseDirectives(prompt)) {
			t.Fatal("not deterministic")
		}
		if d.Tokens < -1 || d.Tokens > mockllm.MaxTokens {
			t.Errorf("tokens out of range: %d", d.Tokens)
		}
		if d.Delay != -1 && (d.Delay < 0 || d.Delay > mockllm.MaxDelay) {
			t.Errorf("delay out of range: %v", d.Delay)
		}
		for _, n := range []int{d.AbortAfter, d.RetryAfter, d.RetryAfterMS, d.HangAfter} {
			if n < -1 {
				t.Errorf("negative count: %+v", d)
			}
		}
		if len(d.Statuses) > mockllm.MaxStatuses || slices.ContainsFunc(d.Statuses, func(c int) bool { return c < 0 }) {
			t.Errorf("bad statuses: %v", d.Statuses)
		}
		if !strings.Contains(prompt, "[") && !reflect.DeepEqual(d, unset()) {
			t.Errorf("directives without brackets: %+v", d)
		}
		if d.Tokens >= 0 && d.Tokens <= 1000 {
			if got := mockllm.Content(prompt, d.Tokens, len(prompt)%2 == 0); len(got) != d.Tokens {
				t.Errorf("Content gave %d tokens, want %d", len(got), d.Tokens)
			}
		}
	})
}
