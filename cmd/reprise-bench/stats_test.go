package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if got := percentile(xs, 50); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := percentile(xs, 99); got != 10 {
		t.Errorf("p99 = %v, want 10", got)
	}
	if got := median([]float64{3, 1, 2, 4}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
}

func TestHist(t *testing.T) {
	h := newHist()
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	h.add(50 * time.Millisecond)
	if got := h.quantile(50); got < 0.49 || got > 0.51 {
		t.Errorf("p50 = %v ms, want ~0.5", got)
	}
	if got := h.quantile(100); got != 50 {
		t.Errorf("p100 = %v ms, want 50", got)
	}
}

func TestReadEvents(t *testing.T) {
	body := "id: 1-1-7\ndata: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		": ping\n\n" +
		"id: 1-2-8\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n" +
		"data: " + strings.Repeat("x", 40<<10) + "\n\n" +
		"data: [DONE]\n\n"
	var content []int
	n, done, err := readEvents(strings.NewReader(body), func(n int, d []byte) {
		if isContent(d) {
			content = append(content, n)
		}
	})
	if err != nil || n != 4 || !done {
		t.Fatalf("readEvents = %d, %v, %v", n, done, err)
	}
	if len(content) != 1 || content[0] != 2 {
		t.Errorf("content events %v, want [2]", content)
	}
	id, k, err := readTo(strings.NewReader(body), 2)
	if err != nil || k != 2 || id != "1-2-8" {
		t.Errorf("readTo = %q, %d, %v", id, k, err)
	}
}

func TestHistTiers(t *testing.T) {
	h := newHist()
	for _, d := range []time.Duration{5 * time.Millisecond, 2 * time.Second, 90 * time.Second, 400 * time.Second} {
		h.add(d)
	}
	for p, want := range map[float64]float64{25: 5, 50: 2000, 75: 90000, 100: 400000} {
		if got := h.quantile(p); got < want || got > want*1.01 {
			t.Errorf("p%v = %v ms, want ~%v", p, got, want)
		}
	}
}
