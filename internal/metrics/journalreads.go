package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/journal"
)

// registerJournalReads exports the journal readers' gets waiting for their
// turn (journal.Config.MaxReads).
func registerJournalReads(reg prometheus.Registerer, stats func() journal.Stats) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_journal_reads_waiting",
		Help: "Journal readers' batched gets waiting for their turn on this instance (the instance's concurrent gets are bounded).",
	}, func() float64 { return float64(stats().ReadsWaiting) }))
}
