package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goSnippet is one ```go block of a document.
type goSnippet struct {
	file  string // the document, relative to the repository
	fence int    // the line of its opening fence
	src   []byte
}

// where is the block's opening fence, file:line.
func (s goSnippet) where() string { return fmt.Sprintf("%s:%d", s.file, s.fence) }

// goSnippets returns the ```go blocks of a Markdown file, each from the
// line after its opening fence to the line before its closing one.
func goSnippets(t *testing.T, root, name string) []goSnippet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out  []goSnippet
		cur  *goSnippet
		line int
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(text) == "```go":
			cur = &goSnippet{file: name, fence: line}
		case cur != nil && strings.TrimSpace(text) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.src = append(cur.src, text+"\n"...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: a ```go block that does not end", cur.where())
	}
	return out
}

// snippetPos is a position in a block's file of TestSnippetsGoBuild's
// module, snippetPkg its package.
var (
	snippetPos = regexp.MustCompile(`(?:\./)?s(\d+)/snippet\.go:(\d+)`)
	snippetPkg = regexp.MustCompile(`snippets/s(\d+)`)
)

// TestSnippetsGoBuild builds the Go code the docs show. The rule: every
// ```go block of README.md and docs/*.md is a whole Go file, from its
// package clause and imports to its last line, that compiles as written
// (against this checkout and the SDK versions of its go.mod) — no
// wrapping, no names the reader must guess: paste it into a file of a
// module and it builds. Each block becomes a package of a temporary
// module that requires github.com/reprise-dev/reprise through a replace
// directive to this checkout, with the requirements of the tests' module
// (tests/go.mod: reprise's own and the SDKs the docs show) and both go.sum
// files; go vet and go build run there, offline (GOPROXY=off: every module
// is one the repository's own build already has).
func TestSnippetsGoBuild(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"README.md"}
	for _, d := range docs {
		names = append(names, filepath.Join("docs", filepath.Base(d)))
	}
	var snippets []goSnippet
	for _, name := range names {
		snippets = append(snippets, goSnippets(t, root, name)...)
	}
	if len(snippets) == 0 {
		t.Fatal("no ```go block in README.md or docs/*.md")
	}

	gomod, err := os.ReadFile(filepath.Join(root, "tests", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/reprise-dev/reprise"
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module snippets"))
	// tests/go.mod requires reprise already; its replace names the checkout
	// relative to tests/, this one absolutely.
	mod = regexp.MustCompile(`(?m)^replace `+regexp.QuoteMeta(self)+` => .*$`).ReplaceAll(mod, fmt.Appendf(nil, "replace %s => %q", self, root))
	if !bytes.Contains(mod, []byte(root)) {
		t.Fatalf("tests/go.mod: no replace of %s", self)
	}
	tmp := t.TempDir()
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(tmp, "go.mod"), mod)
	var sum []byte
	for _, f := range []string{"go.sum", filepath.Join("tests", "go.sum")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sum = append(sum, b...)
	}
	write(filepath.Join(tmp, "go.sum"), sum)

	helper := false
	for i, s := range snippets {
		f, err := parser.ParseFile(token.NewFileSet(), s.where(), s.src, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: not a whole Go file from its package clause (the rule of TestSnippetsGoBuild): %v", s.where(), err)
			continue
		}
		for _, imp := range f.Imports {
			helper = helper || imp.Path.Value == `"`+self+`/resume/roundtrip"`
		}
		write(filepath.Join(tmp, fmt.Sprintf("s%02d", i), "snippet.go"), s.src)
	}
	if !helper {
		t.Error("no ```go block imports resume/roundtrip: the Go helper's snippets were not found")
	}
	if t.Failed() {
		return
	}

	for _, args := range [][]string{{"vet", "./..."}, {"build", "./..."}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			// Positions in the documents: sNN/snippet.go:L is block NN's
			// line L, its fence's line + L.
			msg := snippetPos.ReplaceAllStringFunc(string(out), func(m string) string {
				sub := snippetPos.FindStringSubmatch(m)
				i, _ := strconv.Atoi(sub[1])
				l, _ := strconv.Atoi(sub[2])
				return fmt.Sprintf("%s:%d", snippets[i].file, snippets[i].fence+l)
			})
			msg = snippetPkg.ReplaceAllStringFunc(msg, func(m string) string {
				i, _ := strconv.Atoi(snippetPkg.FindStringSubmatch(m)[1])
				return "the block at " + snippets[i].where()
			})
			t.Errorf("go %s of the docs' ```go blocks: %v\n%s", strings.Join(args, " "), err, msg)
		}
	}
}

// TestRoundtripDocReferences: what resume/roundtrip's package comment
// sends its reader to exists — each repository path it names (a word
// with a slash or ending in .md; /paths are URLs), and each section it
// quotes after a Markdown file, FILE ("Heading"), is a heading of it.
func TestRoundtripDocReferences(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const file = "resume/roundtrip/doc.go"
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatalf("%s: no package comment", file)
	}
	text := strings.Join(strings.Fields(f.Doc.Text()), " ")
	paths := 0
	for _, w := range strings.Fields(text) {
		w = strings.Trim(w, `()[]{},.;:'"`)
		if strings.HasPrefix(w, "/") || (!strings.Contains(w, "/") && !strings.HasSuffix(w, ".md")) {
			continue
		}
		paths++
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(w))); err != nil {
			t.Errorf("%s names %s: %v", file, w, err)
		}
	}
	if paths == 0 {
		t.Errorf("%s names no document: %q", file, text)
	}
	for _, m := range regexp.MustCompile(`([\w./-]+\.md) \("([^"]+)"`).FindAllStringSubmatch(text, -1) {
		doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m[1])))
		if err != nil {
			continue // reported above
		}
		if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(m[2]) + `$`).Match(doc) {
			t.Errorf("%s sends the reader to %s, section %q: %s has no such heading", file, m[1], m[2], m[1])
		}
	}
}
