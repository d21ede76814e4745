package engine

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// Assemble implements Assembler: the message object of message_start, its
// content the blocks of content_block_start by their index with their
// deltas applied (text_delta to text, thinking_delta to thinking,
// signature_delta to signature, citations_delta to citations,
// input_json_delta to input, parsed from the concatenated partial JSON: {}
// when it is empty), its stop_reason, stop_sequence and any other field
// from message_delta, its usage message_start's merged with
// message_delta's (its counts are the message's totals; the others, cache
// counts among them, are kept), or usage when the events give none.
func (Messages) Assemble(events []journal.Event, usage *cost.Usage) ([]byte, error) {
	var msg *object
	blocks := map[int64]*messageBlock{}
	for _, ev := range events {
		if ev.IsEnd() {
			continue
		}
		kind := ev.Type
		if kind == "" {
			kind = dataType(ev.Data)
		}
		switch kind {
		case "message_start":
			var v struct {
				Message json.RawMessage `json:"message"`
			}
			if err := json.Unmarshal(ev.Data, &v); err != nil {
				return nil, assembleError("malformed message_start: %v", err)
			}
			m, err := parseObject(v.Message)
			if err != nil {
				return nil, err
			}
			msg = m
		case "content_block_start", "content_block_delta", "message_delta":
			if msg == nil {
				return nil, assembleError("%s before message_start", kind)
			}
			if err := applyMessageEvent(msg, blocks, kind, ev.Data); err != nil {
				return nil, err
			}
		case "message_stop":
			if msg == nil {
				return nil, assembleError("message_stop before message_start")
			}
			return wholeMessage(msg, blocks, usage)
		case "error":
			return nil, assembleError("the stream carries an error")
		}
	}
	return nil, assembleError("no message_stop event")
}

// messageBlock is one content block being assembled: the block as
// content_block_start gave it, and what its deltas add.
type messageBlock struct {
	block                     *object
	text, thinking, signature *strings.Builder
	input                     *bytes.Buffer // the partial JSON of input_json_delta
	citations                 []json.RawMessage
}

// messageEvent is what Assemble reads of content_block_* and message_delta.
type messageEvent struct {
	Index        *int64          `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        json.RawMessage `json:"delta"`
	Usage        json.RawMessage `json:"usage"`
}

// blockDelta is a content_block_delta's delta.
type blockDelta struct {
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	Thinking    string          `json:"thinking"`
	Signature   string          `json:"signature"`
	PartialJSON string          `json:"partial_json"`
	Citation    json.RawMessage `json:"citation"`
}

// applyMessageEvent applies a content_block_start, content_block_delta or
// message_delta to the message and its blocks.
func applyMessageEvent(msg *object, blocks map[int64]*messageBlock, kind string, data []byte) error {
	var ev messageEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return assembleError("malformed %s: %v", kind, err)
	}
	if kind == "message_delta" {
		return applyMessageDelta(msg, ev)
	}
	if ev.Index == nil {
		return assembleError("%s without an index", kind)
	}
	if kind == "content_block_start" {
		if blocks[*ev.Index] != nil {
			return assembleError("content block %d started twice", *ev.Index)
		}
		block, err := parseObject(ev.ContentBlock)
		if err != nil {
			return err
		}
		blocks[*ev.Index] = &messageBlock{block: block}
		return nil
	}
	b := blocks[*ev.Index]
	if b == nil {
		return assembleError("a delta of content block %d, never started", *ev.Index)
	}
	var d blockDelta
	if err := json.Unmarshal(ev.Delta, &d); err != nil {
		return assembleError("malformed content_block_delta: %v", err)
	}
	switch d.Type {
	case "text_delta":
		b.text = appendText(b.text, b.block, "text", d.Text)
	case "thinking_delta":
		b.thinking = appendText(b.thinking, b.block, "thinking", d.Thinking)
	case "signature_delta":
		b.signature = appendText(b.signature, b.block, "signature", d.Signature)
	case "input_json_delta":
		if b.input == nil {
			b.input = &bytes.Buffer{}
		}
		b.input.WriteString(d.PartialJSON)
	case "citations_delta":
		if isNull(d.Citation) {
			return assembleError("citations_delta without a citation")
		}
		b.citations = append(b.citations, d.Citation)
	}
	return nil
}

// appendText appends s to a text member of block, which starts as the
// block gave it.
func appendText(sb *strings.Builder, block *object, key, s string) *strings.Builder {
	if sb == nil {
		sb = &strings.Builder{}
		var start string
		_ = json.Unmarshal(block.get(key), &start) // absent or null: ""
		sb.WriteString(start)
	}
	sb.WriteString(s)
	return sb
}

// applyMessageDelta sets message_delta's delta members (stop_reason,
// stop_sequence …) on the message, and merges its usage into the
// message's: a null replaces only a member the message already has.
func applyMessageDelta(msg *object, ev messageEvent) error {
	if !isNull(ev.Delta) {
		d, err := parseObject(ev.Delta)
		if err != nil {
			return err
		}
		setMembers(msg, d)
	}
	if isNull(ev.Usage) {
		return nil
	}
	u, err := parseObject(ev.Usage)
	if err != nil {
		return err
	}
	total := newObject()
	if prev := msg.get("usage"); !isNull(prev) {
		if total, err = parseObject(prev); err != nil {
			return err
		}
	}
	setMembers(total, u)
	msg.set("usage", total.bytes())
	return nil
}

// setMembers sets src's members on dst; a null only replaces a member
// dst has.
func setMembers(dst, src *object) {
	for _, k := range src.keys {
		if v := src.get(k); !isNull(v) || dst.get(k) != nil {
			dst.set(k, v)
		}
	}
}

// wholeMessage is the message with its content blocks and usage.
func wholeMessage(msg *object, blocks map[int64]*messageBlock, usage *cost.Usage) ([]byte, error) {
	content := make([]json.RawMessage, 0, len(blocks))
	for _, i := range slices.Sorted(maps.Keys(blocks)) {
		block, err := blocks[i].whole()
		if err != nil {
			return nil, err
		}
		content = append(content, block)
	}
	msg.set("content", jsonArray(content))
	if isNull(msg.get("usage")) && usage != nil {
		u, _ := json.Marshal(struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
		}{usage.PromptTokens, usage.CompletionTokens})
		msg.set("usage", u)
	}
	return compactJSON(msg.bytes())
}

// whole is the block with its deltas applied.
func (b *messageBlock) whole() ([]byte, error) {
	for _, t := range []struct {
		key string
		sb  *strings.Builder
	}{{"text", b.text}, {"thinking", b.thinking}, {"signature", b.signature}} {
		if t.sb != nil {
			b.block.set(t.key, jsonString(t.sb.String()))
		}
	}
	if b.input != nil {
		input := bytes.TrimSpace(b.input.Bytes())
		if len(input) == 0 {
			input = []byte("{}")
		}
		if !json.Valid(input) {
			return nil, assembleError("a tool's input is not JSON: %.64q", input)
		}
		b.block.set("input", input)
	}
	if len(b.citations) > 0 {
		var prev []json.RawMessage
		_ = json.Unmarshal(b.block.get("citations"), &prev) // absent or null: none
		b.block.set("citations", jsonArray(append(prev, b.citations...)))
	}
	return b.block.bytes(), nil
}
