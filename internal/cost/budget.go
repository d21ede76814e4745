package cost

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidBudget is returned by ParseBudget for a budget it cannot read.
var ErrInvalidBudget = errors.New("cost: invalid budget")

// Period is the calendar window (UTC) a Budget covers: an hour, a day or a
// month, each starting at its boundary (xx:00, 00:00, the 1st).
type Period string

// Periods.
const (
	Hour  Period = "hour"
	Day   Period = "day"
	Month Period = "month"
)

// Window returns the window of p that t falls in: its start (inclusive)
// and end (exclusive), in UTC.
func (p Period) Window(t time.Time) (start, end time.Time) {
	t = t.UTC()
	switch p {
	case Hour:
		start = t.Truncate(time.Hour)
		return start, start.Add(time.Hour)
	case Month:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	default:
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
}

// ID names the window of p that t falls in ("day:2026-12-08"): spend is
// counted per window id, so every instance counts into the same one.
func (p Period) ID(t time.Time) string {
	start, _ := p.Window(t)
	switch p {
	case Hour:
		return "hour:" + start.Format("2006-01-02T15")
	case Month:
		return "month:" + start.Format("2006-01")
	default:
		return "day:" + start.Format("2006-01-02")
	}
}

// Budget is the most a proxy key may spend in each window of its Period,
// in the price table's currency. The zero Budget is none.
type Budget struct {
	Limit  float64
	Period Period
}

// IsZero reports whether b is no budget.
func (b Budget) IsZero() bool { return b.Period == "" }

// String is b as ParseBudget reads it ("25/day").
func (b Budget) String() string {
	if b.IsZero() {
		return ""
	}
	return strconv.FormatFloat(b.Limit, 'f', -1, 64) + "/" + string(b.Period)
}

// ParseBudget reads "USD/PERIOD": a positive amount and hour, day or month
// ("25/day", "0.5/hour", "300/month").
func ParseBudget(s string) (Budget, error) {
	amount, period, ok := strings.Cut(s, "/")
	if !ok {
		return Budget{}, fmt.Errorf("%w: %q: want AMOUNT/hour, AMOUNT/day or AMOUNT/month", ErrInvalidBudget, s)
	}
	v, err := strconv.ParseFloat(strings.TrimPrefix(amount, "$"), 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return Budget{}, fmt.Errorf("%w: %q: the amount must be a positive number", ErrInvalidBudget, s)
	}
	switch p := Period(period); p {
	case Hour, Day, Month:
		return Budget{Limit: v, Period: p}, nil
	}
	return Budget{}, fmt.Errorf("%w: %q: the period must be hour, day or month", ErrInvalidBudget, s)
}
