package metrics

// Families lists every family reprise exports once an upstream is watched:
// the names alert rules and dashboards are written against. Its test
// checks it against what New registers, and the end-to-end scrape against
// /metrics.
func Families() []string {
	return []string{
		"reprise_requests_total", "reprise_duplicates_suppressed_total", "reprise_resumes_total",
		"reprise_generations_total", "reprise_events_journaled_total", "reprise_generations_running",
		"reprise_stream_readers", "reprise_upstream_requests_total", "reprise_upstream_attempts_total",
		"reprise_upstream_retries_total", "reprise_retry_outcomes_total", "reprise_upstream_first_byte_seconds",
		"reprise_client_first_token_seconds", "reprise_resume_first_event_seconds", "reprise_journal_append_seconds",
		"reprise_generations_shed_total", "reprise_journal_lag_seconds", "reprise_results_cache_bytes",
		"reprise_journal_retries_total", "reprise_journal_errors_total", "reprise_journal_stalls_total", "reprise_upstream_breaker_open",
		"reprise_upstream_retry_budget_used_ratio",
		// cost.go: reprise_cost_total and reprise_cost_saved_total have a
		// series per price table entry once one is priced.
		"reprise_tokens_total", "reprise_tokens_estimated_total", "reprise_generations_saved_total", "reprise_tokens_saved_total",
		"reprise_cost_guard_narrowed", "reprise_cost_guard_switches_total",
		"reprise_keyless_left_total",
		"reprise_generations_lost_total", // lost.go
		"reprise_journal_reads_waiting",  // journalreads.go
	}
}
