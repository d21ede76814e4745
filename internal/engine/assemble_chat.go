package engine

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// Assemble implements Assembler: the chat.completion object of the chunks
// up to [DONE]. Each choice (by its index) has its deltas merged into its
// message — content, refusal and reasoning concatenated, tool calls merged
// by their index with their arguments concatenated — and keeps its last
// finish_reason and its logprobs, concatenated; the chunks' other members
// (id, created, model, service_tier, system_fingerprint …) keep their last
// value that is not null. The usage is the usage chunk's, or usage when
// the stream journaled none; absent when neither is known.
func (Chat) Assemble(events []journal.Event, usage *cost.Usage) ([]byte, error) {
	top := newObject()
	choices := map[int64]*merged{}
	var usageRaw json.RawMessage
	done, chunks := false, 0
	for _, ev := range events {
		if ev.IsEnd() {
			continue
		}
		if string(ev.Data) == "[DONE]" {
			done = true
			break
		}
		if f := upstreamFailure(ev.Data); f != nil {
			return nil, assembleError("the stream carries an error: %s", f.Message)
		}
		chunk, err := parseObject(ev.Data)
		if err != nil {
			return nil, err
		}
		chunks++
		for _, k := range chunk.keys {
			v := chunk.vals[k]
			switch k {
			case "choices":
				if err := mergeChoices(choices, v); err != nil {
					return nil, err
				}
			case "usage":
				if !isNull(v) {
					usageRaw = v
				}
			case "object", "obfuscation": // the chunk's own
			default:
				if !isNull(v) || top.get(k) == nil {
					top.set(k, v)
				}
			}
		}
	}
	if !done || chunks == 0 {
		return nil, assembleError("no chunk before [DONE]")
	}
	if usageRaw == nil && usage != nil {
		usageRaw, _ = json.Marshal(usage.Filled()) // prompt_tokens, completion_tokens, total_tokens
	}

	out := newObject()
	for _, k := range []string{"id", "object", "created", "model", "choices", "usage"} {
		switch v := top.get(k); {
		case k == "object":
			out.set(k, json.RawMessage(`"chat.completion"`))
		case k == "choices":
			out.set(k, chatChoices(choices))
		case k == "usage":
			if usageRaw != nil {
				out.set(k, usageRaw)
			}
		case v != nil:
			out.set(k, v)
		}
	}
	for _, k := range top.keys {
		if out.get(k) == nil {
			out.set(k, top.get(k))
		}
	}
	return compactJSON(out.bytes())
}

// mergeChoices merges a chunk's choices into choices, by their index (0
// when a choice names none): its delta into its message.
func mergeChoices(choices map[int64]*merged, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return assembleError("choices is not an array: %v", err)
	}
	for _, c := range list {
		choice, err := parseObject(c)
		if err != nil {
			return err
		}
		var index int64
		if v := choice.get("index"); v != nil && json.Unmarshal(v, &index) != nil {
			return assembleError("a choice's index is not an integer: %.32q", v)
		}
		m := choices[index]
		if m == nil {
			m = newMerged()
			choices[index] = m
		}
		for _, k := range choice.keys {
			name := k
			if k == "delta" {
				name = "message"
			}
			if err := m.merge(name, choice.get(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// chatChoices is the choices array of the answer, in index order: each
// choice's index, message, logprobs (when the chunks had them) and
// finish_reason, then any other member the chunks' choices had.
func chatChoices(choices map[int64]*merged) json.RawMessage {
	list := make([]json.RawMessage, 0, len(choices))
	for _, i := range slices.Sorted(maps.Keys(choices)) {
		c := choices[i]
		c.setRaw("index", strconv.AppendInt(nil, i, 10))
		c.setRaw("message", chatMessage(c.vals["message"]))
		if !c.has("finish_reason") {
			c.setRaw("finish_reason", json.RawMessage("null"))
		}
		list = append(list, c.bytes("index", "message", "logprobs", "finish_reason"))
	}
	return jsonArray(list)
}

// chatMessage is a choice's message from its merged deltas: the role
// (assistant unless a delta said), the content (null when there was none,
// or none but tool calls, as OpenAI answers), the tool calls, refusal and
// annotations, then any other member, in the order of OpenAI's answers.
func chatMessage(v *mergedValue) json.RawMessage {
	m := newMerged()
	if v != nil && v.obj != nil {
		m = v.obj
	}
	if m.text("role") == "" {
		m.setRaw("role", json.RawMessage(`"assistant"`))
	}
	calls := m.has("tool_calls") || m.has("function_call")
	if !m.has("content") || calls && m.text("content") == "" {
		m.setRaw("content", json.RawMessage("null"))
	}
	return m.bytes("role", "content", "tool_calls", "refusal", "annotations")
}
