package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// ErrAssemble is returned by an Assembler when the events it is given make
// no whole answer of its format: the terminal event is missing, an event
// carries an error, or an event is not the JSON the format sends.
var ErrAssemble = errors.New("engine: events make no whole answer")

// assembleError is ErrAssemble saying why.
func assembleError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAssemble, fmt.Sprintf(format, args...))
}

// object is a JSON object that keeps its members in order: what an
// upstream sent is written back with its keys in the order it sent them.
type object struct {
	keys []string
	vals map[string]json.RawMessage
}

func newObject() *object { return &object{vals: map[string]json.RawMessage{}} }

// parseObject reads a JSON object, its members in order: a repeated key
// keeps its first place and its last value.
func parseObject(data []byte) (*object, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, assembleError("not a JSON object: %.64q", data)
	}
	o := newObject()
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, assembleError("malformed JSON: %v", err)
		}
		key := tok.String() // a name: the decoder reads nothing else here
		v, err := dec.ReadValue()
		if err != nil {
			return nil, assembleError("malformed JSON: %v", err)
		}
		o.set(key, json.RawMessage(bytes.Clone(v)))
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, assembleError("malformed JSON: %v", err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, assembleError("data after the JSON object: %.64q", data)
	}
	return o, nil
}

// get is the value of key, nil if o has none.
func (o *object) get(key string) json.RawMessage { return o.vals[key] }

// set gives key the value v, in its place if o has it, last if not.
func (o *object) set(key string, v json.RawMessage) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// bytes is o as JSON.
func (o *object) bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// jsonString is s as a JSON string, as the APIs write it: <, > and &
// literal, not escaped as encoding/json does by default.
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// jsonArray is the JSON array of elems, each as it is.
func jsonArray(elems []json.RawMessage) []byte {
	b := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// compactJSON is an answer as it is sent: compact, and checked to be JSON.
func compactJSON(data []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return nil, assembleError("assembled answer is not JSON: %v", err)
	}
	return b.Bytes(), nil
}

// isNull reports whether a JSON value is null (or missing).
func isNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || string(v) == "null"
}

// merged is an object accumulated from a stream's deltas of it (a chat
// choice, its message, a tool call): a string is appended to what came
// before, but for the names a delta repeats whole (wholeStrings); an
// object merges; an array of objects that carry an "index" merges them by
// it (tool calls), any other array is appended to; any other value
// replaces what was, except that null replaces nothing. Members keep the
// order they were first seen in.
type merged struct {
	keys []string
	vals map[string]*mergedValue
}

// wholeStrings are the string members a delta gives whole: a repeat
// replaces rather than extends them.
var wholeStrings = map[string]bool{"id": true, "type": true, "name": true, "role": true, "finish_reason": true}

// mergedValue is one member of a merged object: one of text, obj, an
// array (items and indexed) or raw.
type mergedValue struct {
	isText  bool
	text    strings.Builder
	obj     *merged
	isArray bool
	items   []json.RawMessage
	indexed map[int64]*merged
	raw     json.RawMessage
}

func newMerged() *merged { return &merged{vals: map[string]*mergedValue{}} }

// has reports whether m has a member key that is not null.
func (m *merged) has(key string) bool {
	v := m.vals[key]
	return v != nil && (v.isText || v.obj != nil || v.isArray || !isNull(v.raw))
}

// text is member key's text, "" if it is no string.
func (m *merged) text(key string) string {
	if v := m.vals[key]; v != nil && v.isText {
		return v.text.String()
	}
	return ""
}

// mergeObject merges the members of a delta object into m.
func (m *merged) mergeObject(data json.RawMessage) error {
	o, err := parseObject(data)
	if err != nil {
		return err
	}
	for _, k := range o.keys {
		if err := m.merge(k, o.vals[k]); err != nil {
			return err
		}
	}
	return nil
}

// setRaw gives member key the value v outright.
func (m *merged) setRaw(key string, v json.RawMessage) {
	if _, ok := m.vals[key]; !ok {
		m.keys = append(m.keys, key)
	}
	m.vals[key] = &mergedValue{raw: v}
}

// merge merges one delta member into m.
func (m *merged) merge(key string, v json.RawMessage) error {
	cur := m.vals[key]
	if cur == nil {
		cur = &mergedValue{}
		m.keys = append(m.keys, key)
		m.vals[key] = cur
	}
	v = bytes.TrimSpace(v)
	switch {
	case isNull(v):
		if !m.has(key) {
			cur.raw = json.RawMessage("null")
		}
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return assembleError("malformed JSON string: %v", err)
		}
		if !cur.isText {
			*cur = mergedValue{isText: true}
		}
		if wholeStrings[key] && s != "" {
			cur.text.Reset()
		}
		cur.text.WriteString(s)
	case v[0] == '{':
		if cur.obj == nil {
			*cur = mergedValue{obj: newMerged()}
		}
		return cur.obj.mergeObject(v)
	case v[0] == '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return assembleError("malformed JSON array: %v", err)
		}
		if !cur.isArray {
			*cur = mergedValue{isArray: true}
		}
		for _, e := range elems {
			if err := cur.mergeElement(e); err != nil {
				return err
			}
		}
	default:
		*cur = mergedValue{raw: slices.Clone(v)}
	}
	return nil
}

// mergeElement merges one element of a delta array: by its "index" when
// it is an object that has one, appended when not.
func (cur *mergedValue) mergeElement(e json.RawMessage) error {
	var at struct {
		Index *int64 `json:"index"`
	}
	if e = bytes.TrimSpace(e); len(e) == 0 || e[0] != '{' || json.Unmarshal(e, &at) != nil || at.Index == nil {
		cur.items = append(cur.items, e)
		return nil
	}
	if cur.indexed == nil {
		cur.indexed = map[int64]*merged{}
	}
	el := cur.indexed[*at.Index]
	if el == nil {
		el = newMerged()
		cur.indexed[*at.Index] = el
	}
	return el.mergeObject(e)
}

// bytes is m as JSON: the members named in lead first (those m has), then
// the others in the order first seen.
func (m *merged) bytes(lead ...string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	write := func(k string) {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.Write(m.vals[k].bytes())
	}
	for _, k := range lead {
		if m.vals[k] != nil {
			write(k)
		}
	}
	for _, k := range m.keys {
		if !slices.Contains(lead, k) {
			write(k)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// bytes is the value as JSON; an element merged by its index is written
// in index order without it (a whole answer's tool calls have none).
func (v *mergedValue) bytes() []byte {
	switch {
	case v.isText:
		return jsonString(v.text.String())
	case v.obj != nil:
		return v.obj.bytes()
	case v.isArray:
		elems := make([]json.RawMessage, 0, len(v.indexed)+len(v.items))
		for _, i := range slices.Sorted(maps.Keys(v.indexed)) {
			elems = append(elems, v.indexed[i].without("index").bytes())
		}
		return jsonArray(append(elems, v.items...))
	case len(v.raw) > 0:
		return v.raw
	}
	return []byte("null")
}

// without is m less its member key.
func (m *merged) without(key string) *merged {
	return &merged{keys: slices.DeleteFunc(slices.Clone(m.keys), func(k string) bool { return k == key }), vals: m.vals}
}
