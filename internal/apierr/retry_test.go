package apierr

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/reprise-dev/reprise/classify"
)

// signal is what an answer tells a client about sending the request again.
type signal int

const (
	// retry: no X-Should-Retry, a status the SDKs retry (408, 409, 429,
	// 5xx), no Retry-After: the client's own backoff.
	retry signal = iota
	// retryAfter: the same, with Retry-After saying when.
	retryAfter
	// noRetry: X-Should-Retry: false, no Retry-After.
	noRetry
)

// TestRetrySignals: every code of the catalogue has its retry signal
// decided here, with why, and the answer WriteIn (and ShouldNotRetry, for
// answers the engine writes from a generation's head or record) gives
// says so. A code added to the catalogue without a row fails.
func TestRetrySignals(t *testing.T) {
	decided := map[string]struct {
		want signal
		why  string
	}{
		NotFound:           {noRetry, "a route that does not exist"},
		MethodNotAllowed:   {noRetry, "the method will not be allowed on a retry"},
		KeyNotFound:        {noRetry, "no key, or not the caller's: the same on a retry"},
		BadCursor:          {noRetry, "a cursor this proxy never issued"},
		BadKey:             {noRetry, "a malformed Idempotency-Key"},
		InvalidJSON:        {noRetry, "the body is the caller's"},
		InvalidRequest:     {noRetry, "the body is the caller's"},
		InvalidBody:        {noRetry, "the body is the caller's"},
		TooLarge:           {noRetry, "the same body is as large again"},
		MediaType:          {noRetry, "the same Content-Type again"},
		Mismatch:           {noRetry, "the key stands for another body"},
		InProgress:         {retryAfter, "the generation will end: come back after it"},
		NoKey:              {noRetry, "credentials do not appear on a retry"},
		BadProxyKey:        {noRetry, "credentials do not appear on a retry"},
		TooManyGenerations: {retryAfter, "a place frees up when a generation ends"},
		TooManyReaders:     {retryAfter, "a place frees up when a reader leaves"},
		BadRange:           {noRetry, "a malformed Range"},
		Unsatisfiable:      {noRetry, "the size is known: the same Range is outside it again"},
		Unavailable:        {retryAfter, "NATS reconnects, leaders are elected"},
		JournalFull:        {retryAfter, "old events expire (the TTL) or the store's limit is raised"},
		ShuttingDown:       {retryAfter, "another instance (or this one restarted) serves it"},
		NoStreaming:        {noRetry, "the server reprise is mounted in cannot flush: the same on a retry"},
		Overloaded:         {retryAfter, "the journal catches up"},
		OriginNotAllowed:   {noRetry, "the page's origin does not change"},
		InvalidPath:        {noRetry, "the path is the caller's"},
		ModelNotAllowed:    {noRetry, "the key's models do not change on a retry"},
		PathNotAllowed:     {noRetry, "the key's paths do not change on a retry"},
		BudgetExceeded:     {retryAfter, "the budget's window ends"},

		OwnerLost:      {retry, "the key regenerates (or is continued) on another instance"},
		Cancelled:      {noRetry, "someone stopped it on purpose: a retry would generate it again"},
		NotRunning:     {noRetry, "nothing runs to cancel until the key runs again"},
		ProxyShutdown:  {retryAfter, "another instance generates it"},
		JournalFailure: {retryAfter, "the journal recovers; the key generates afresh"},
		StreamTooLarge: {noRetry, "the proxy's own limit: the same request generates (and bills) as much again"},
		InvalidEvent:   {retry, "a broken stream: a fresh generation may be whole"},
		UpstreamBody:   {retry, "a broken answer: a fresh one may be whole"},
		NoUpstream:     {noRetry, "configuration: no upstream serves the path and model, none was called"},
		UpstreamError:  {retry, "the upstream's own status decides (502 is only the default)"},

		classify.CodeUnreachable: {retry, "nothing reached the upstream: nothing was billed"},
		classify.CodeTimeout:     {noRetry, "the upstream got it and may have billed it (and reprise already waited)"},
		classify.CodeNoResponse:  {noRetry, "the upstream got it and may have billed it"},
		classify.CodeBadResponse: {noRetry, "the upstream got it and may have billed it"},
		classify.CodeTLS:         {noRetry, "a certificate does not become trusted on a retry"},
		classify.CodeUnavailable: {retryAfter, "the breaker lets a probe through after its delay"},
		classify.CodeSaturated:   {retryAfter, "a place toward the upstream frees up"},
		classify.CodeInterrupted: {retry, "a broken stream is no result: the key generates afresh"},
	}
	for code := range catalogue {
		if _, ok := decided[code]; !ok {
			t.Errorf("%s: no retry signal decided: add it to TestRetrySignals", code)
		}
	}
	for code, d := range decided {
		t.Run(code, func(t *testing.T) {
			if !Known(code) {
				t.Fatalf("%s is decided here but not in the catalogue", code)
			}
			e := New(code)
			w := httptest.NewRecorder()
			e.WriteIn(w, OpenAI)
			noRetryHeader := w.Header().Get("X-Should-Retry") == "false"
			retryAfterHeader := w.Header().Get("Retry-After") != ""
			retried := e.Status == http.StatusRequestTimeout || e.Status == http.StatusConflict || e.Status == http.StatusTooManyRequests || e.Status >= 500
			switch d.want {
			case noRetry:
				if !noRetryHeader || retryAfterHeader {
					t.Errorf("%d: X-Should-Retry false %v, Retry-After %q; want X-Should-Retry: false and no Retry-After (%s)", e.Status, noRetryHeader, w.Header().Get("Retry-After"), d.why)
				}
			case retry, retryAfter:
				if noRetryHeader || !retried {
					t.Errorf("%d, X-Should-Retry false %v: want a status the SDKs retry and no X-Should-Retry (%s)", e.Status, noRetryHeader, d.why)
				}
				if retryAfterHeader != (d.want == retryAfter) {
					t.Errorf("Retry-After %q, want one: %v (%s)", w.Header().Get("Retry-After"), d.want == retryAfter, d.why)
				}
			}
			if (e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable) && d.want != retryAfter {
				t.Errorf("%d asks to come back later: it must say when (Retry-After)", e.Status)
			}
			if got := ShouldNotRetry(e.Status, code); got != (d.want == noRetry) {
				t.Errorf("ShouldNotRetry(%d, %s) = %v, want %v", e.Status, code, got, d.want == noRetry)
			}
			if classify.Unanswered(code) && d.want != noRetry {
				t.Errorf("classify.Unanswered: a retry may bill twice, yet %s is not noRetry", code)
			}
		})
	}
	// An upstream's own code is never taken for one of the catalogue's.
	if ShouldNotRetry(http.StatusBadGateway, Foreign(StreamTooLarge)) || ShouldNotRetry(http.StatusBadGateway, "rate_limit_exceeded") {
		t.Error("an upstream's own code got the catalogue's signal")
	}
}
