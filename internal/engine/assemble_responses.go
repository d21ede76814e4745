package engine

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// Assemble implements Assembler: the response object that the terminal
// event (response.completed or response.incomplete) carries, as the
// upstream sent it — it is the answer a non-streamed request gets. An
// upstream that sent it with no output gets the items of its
// response.output_item.done events, by output_index. The usage is the
// response's own.
func (Responses) Assemble(events []journal.Event, _ *cost.Usage) ([]byte, error) {
	items := map[int64]json.RawMessage{}
	for _, ev := range events {
		if ev.IsEnd() {
			continue
		}
		kind := ev.Type
		if kind == "" {
			kind = dataType(ev.Data)
		}
		switch kind {
		case "response.output_item.done":
			var v struct {
				Index int64           `json:"output_index"`
				Item  json.RawMessage `json:"item"`
			}
			if json.Unmarshal(ev.Data, &v) != nil || isNull(v.Item) {
				return nil, assembleError("malformed %s event", kind)
			}
			items[v.Index] = v.Item
		case "response.completed", "response.incomplete":
			var v struct {
				Response json.RawMessage `json:"response"`
			}
			if err := json.Unmarshal(ev.Data, &v); err != nil || isNull(v.Response) {
				return nil, assembleError("%s carries no response", kind)
			}
			return responseWithOutput(v.Response, items)
		case "response.failed", "error":
			return nil, assembleError("the stream carries an error (%s)", kind)
		}
	}
	return nil, assembleError("no response.completed or response.incomplete event")
}

// responseWithOutput is the response object, its output the items given
// when it has none of its own.
func responseWithOutput(response json.RawMessage, items map[int64]json.RawMessage) ([]byte, error) {
	o, err := parseObject(response)
	if err != nil {
		return nil, err
	}
	var output []json.RawMessage
	if len(items) > 0 && (json.Unmarshal(o.get("output"), &output) != nil || len(output) == 0) {
		whole := make([]json.RawMessage, 0, len(items))
		for _, i := range slices.Sorted(maps.Keys(items)) {
			whole = append(whole, items[i])
		}
		o.set("output", jsonArray(whole))
		return compactJSON(o.bytes())
	}
	return compactJSON(response)
}
