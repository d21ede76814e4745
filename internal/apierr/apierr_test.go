package apierr_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/reprise-dev/reprise/internal/apierr"
)

// TestShapes: the same error in OpenAI's shape and in Anthropic's, with a
// type Anthropic's SDKs know for each status.
func TestShapes(t *testing.T) {
	for _, tc := range []struct {
		code, anthropicType string
	}{
		{apierr.BadKey, "invalid_request_error"},
		{apierr.NoKey, "authentication_error"},
		{apierr.KeyNotFound, "not_found_error"},
		{apierr.TooLarge, "request_too_large"},
		{apierr.TooManyGenerations, "rate_limit_error"},
		{apierr.Unavailable, "overloaded_error"},
		{apierr.OwnerLost, "api_error"},
	} {
		e := apierr.New(tc.code)
		var o struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal(e.BodyIn(apierr.OpenAI), &o); err != nil || o.Error.Code != tc.code || o.Error.Message != e.Message || o.Error.Type != e.Type {
			t.Errorf("%s in OpenAI's shape: %+v, %v", tc.code, o, err)
		}
		var a struct {
			Type  string
			Error struct{ Type, Message, Code string }
		}
		if err := json.Unmarshal(e.BodyIn(apierr.Anthropic), &a); err != nil || a.Type != "error" || a.Error.Type != tc.anthropicType ||
			a.Error.Message != e.Message || a.Error.Code != tc.code {
			t.Errorf("%s in Anthropic's shape: %+v, %v; want type %s", tc.code, a, err, tc.anthropicType)
		}
	}
	upstream := apierr.New(apierr.UpstreamError)
	upstream.Type = "overloaded_error" // an Anthropic upstream's own
	var a struct{ Error struct{ Type string } }
	_ = json.Unmarshal(upstream.BodyIn(apierr.Anthropic), &a)
	if a.Error.Type != "overloaded_error" {
		t.Errorf("an Anthropic upstream's type became %q", a.Error.Type)
	}
	w := httptest.NewRecorder()
	apierr.New(apierr.InProgress).WriteIn(w, apierr.Anthropic)
	if w.Code != 409 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("WriteIn: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestNewIsACopy: a caller that changes an error does not change the
// catalogue.
func TestNewIsACopy(t *testing.T) {
	e := apierr.New(apierr.Mismatch)
	e.Message, e.Status = "changed", 500
	if again := apierr.New(apierr.Mismatch); again.Message == "changed" || again.Status != 422 {
		t.Errorf("the catalogue changed: %+v", again)
	}
	if unknown := apierr.New("no_such_code"); apierr.Known("no_such_code") || unknown.Status != 502 || unknown.Message == "" {
		t.Errorf("unknown code: %+v", unknown)
	}
}

// TestShouldRetry: answers a retry cannot change tell SDKs not to retry;
// the others leave it to them.
func TestShouldRetry(t *testing.T) {
	for code, final := range map[string]bool{
		apierr.BadKey: true, apierr.NoKey: true, apierr.KeyNotFound: true, apierr.TooLarge: true, apierr.MediaType: true,
		apierr.Mismatch: true, apierr.InProgress: false, apierr.TooManyGenerations: false, apierr.Unavailable: false, apierr.OwnerLost: false,
	} {
		w := httptest.NewRecorder()
		apierr.New(code).Write(w)
		if got := w.Header().Get("X-Should-Retry") == "false"; got != final {
			t.Errorf("%s: X-Should-Retry false = %v, want %v", code, got, final)
		}
	}
}

// TestForeign: an upstream's code that is one of the catalogue's is kept
// apart from reprise's; any other, and upstream_error, as it is.
func TestForeign(t *testing.T) {
	for code, want := range map[string]string{
		apierr.OwnerLost: "upstream:owner_lost", apierr.JournalFailure: "upstream:journal_failure", "upstream_timeout": "upstream:upstream_timeout",
		apierr.UpstreamError: apierr.UpstreamError, "rate_limit_exceeded": "rate_limit_exceeded", "": "",
	} {
		if got := apierr.Foreign(code); got != want || apierr.Known(got) && got != apierr.UpstreamError {
			t.Errorf("Foreign(%q) = %q, want %q", code, got, want)
		}
	}
}
