package mockllm_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func newRecorder(tb testing.TB, h http.Handler, method string) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(tb.Context(), method, "/ledger", nil))
	return rec
}
