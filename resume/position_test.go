package resume_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/resume"
)

func TestPositionRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		pos  resume.Position
		want string
	}{
		{name: "before the first event", pos: resume.Position{Gen: 1}, want: "1-0-0"},
		{name: "typical", pos: resume.Position{Gen: 2, Offset: 17, Seq: 12345}, want: "2-17-12345"},
		{name: "no hint", pos: resume.Position{Gen: 3, Offset: 4}, want: "3-4-0"},
		{name: "max", pos: resume.Position{Gen: math.MaxUint64, Offset: math.MaxUint64, Seq: math.MaxUint64},
			want: "18446744073709551615-18446744073709551615-18446744073709551615"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.pos.String()
			if s != tc.want {
				t.Fatalf("String() = %q, want %q", s, tc.want)
			}
			got, err := resume.ParsePosition(s)
			if err != nil {
				t.Fatalf("ParsePosition(%q): %v", s, err)
			}
			if got != tc.pos {
				t.Fatalf("ParsePosition(%q) = %+v, want %+v", s, got, tc.pos)
			}
		})
	}
}

func TestParsePosition(t *testing.T) {
	maxU := strconv.FormatUint(math.MaxUint64, 10)
	tests := []struct {
		name    string
		in      string
		want    resume.Position
		wantErr error
	}{
		{name: "empty is no cursor", in: "", want: resume.Position{}},
		{name: "zeros after gen", in: "1-0-0", want: resume.Position{Gen: 1}},
		{name: "max values", in: maxU + "-" + maxU + "-" + maxU, want: resume.Position{Gen: math.MaxUint64, Offset: math.MaxUint64, Seq: math.MaxUint64}},
		{name: "gen 0", in: "0-1-1", wantErr: resume.ErrBadCursor},
		{name: "all zero", in: "0-0-0", wantErr: resume.ErrBadCursor},
		{name: "empty gen", in: "-1-1", wantErr: resume.ErrBadCursor},
		{name: "empty offset", in: "1--1", wantErr: resume.ErrBadCursor},
		{name: "empty seq", in: "1-1-", wantErr: resume.ErrBadCursor},
		{name: "only dashes", in: "--", wantErr: resume.ErrBadCursor},
		{name: "leading zero gen", in: "01-1-1", wantErr: resume.ErrBadCursor},
		{name: "leading zero offset", in: "1-01-1", wantErr: resume.ErrBadCursor},
		{name: "leading zero seq", in: "1-1-00", wantErr: resume.ErrBadCursor},
		{name: "letters", in: "1-a-1", wantErr: resume.ErrBadCursor},
		{name: "hex", in: "1-0x1-1", wantErr: resume.ErrBadCursor},
		{name: "plus sign", in: "+1-1-1", wantErr: resume.ErrBadCursor},
		{name: "underscore", in: "1-1_0-1", wantErr: resume.ErrBadCursor},
		{name: "non-ASCII digit", in: "1-١-1", wantErr: resume.ErrBadCursor},
		{name: "overflow gen", in: "18446744073709551616-1-1", wantErr: resume.ErrBadCursor},
		{name: "overflow seq", in: "1-1-99999999999999999999", wantErr: resume.ErrBadCursor},
		{name: "too long", in: "1-1-" + strings.Repeat("9", 61), wantErr: resume.ErrBadCursor},
		{name: "two parts", in: "1-1", wantErr: resume.ErrBadCursor},
		{name: "one part", in: "1", wantErr: resume.ErrBadCursor},
		{name: "four parts", in: "1-1-1-1", wantErr: resume.ErrBadCursor},
		{name: "trailing dash", in: "1-1-1-", wantErr: resume.ErrBadCursor},
		{name: "negative", in: "1--1-1", wantErr: resume.ErrBadCursor},
		{name: "leading space", in: " 1-1-1", wantErr: resume.ErrBadCursor},
		{name: "trailing space", in: "1-1-1 ", wantErr: resume.ErrBadCursor},
		{name: "inner space", in: "1- 1-1", wantErr: resume.ErrBadCursor},
		{name: "other separator", in: "1.1.1", wantErr: resume.ErrBadCursor},
		{name: "newline", in: "1-1-1\n", wantErr: resume.ErrBadCursor},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resume.ParsePosition(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParsePosition(%q) error = %v, want %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("ParsePosition(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{
		"", "1-0-0", "2-17-12345", "0-0-0", "01-1-1", "1--1", "1-1-1-1", " 1-1-1", "+1-1-1",
		"18446744073709551615-18446744073709551615-18446744073709551615",
		"18446744073709551616-1-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := resume.ParsePosition(s)
		if err != nil {
			if !errors.Is(err, resume.ErrBadCursor) {
				t.Fatalf("ParsePosition(%q) error %v is not ErrBadCursor", s, err)
			}
			if p != (resume.Position{}) {
				t.Fatalf("ParsePosition(%q) = %+v with error %v", s, p, err)
			}
			return
		}
		if s == "" {
			if p != (resume.Position{}) {
				t.Fatalf("ParsePosition(\"\") = %+v, want the zero Position", p)
			}
			return
		}
		if p.Gen == 0 {
			t.Fatalf("ParsePosition(%q) accepted generation 0", s)
		}
		if got := p.String(); got != s {
			t.Fatalf("ParsePosition(%q).String() = %q", s, got)
		}
		if again, err := resume.ParsePosition(p.String()); err != nil || again != p {
			t.Fatalf("ParsePosition(%q) = %+v, %v; want %+v", p.String(), again, err, p)
		}
	})
}

func ExampleParsePosition() {
	p, err := resume.ParsePosition("2-17-12345")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("generation %d, after event %d, seek hint %d\n", p.Gen, p.Offset, p.Seq)
	p.Offset++
	fmt.Println(p)

	_, err = resume.ParsePosition("2-017-12345")
	fmt.Println(err)
	// Output:
	// generation 2, after event 17, seek hint 12345
	// 2-18-12345
	// resume: malformed cursor
}
