// Package jsonobj joins JSON objects: how a report that embeds a value with
// its own encoding (a store.ArtifactInfo, an alias key kept for an older
// name) is written as one flat object.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Concat encodes each of vs, which must encode as JSON objects, and
// returns one object with all their members in order. A member named twice
// is refused: the result would be ambiguous to a reader.
func Concat(vs ...any) ([]byte, error) {
	out := []byte{'{'}
	seen := map[string]bool{}
	for _, v := range vs {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil || members == nil {
			return nil, fmt.Errorf("jsonobj: %T does not encode as an object", v)
		}
		for k := range members {
			if seen[k] {
				return nil, fmt.Errorf("jsonobj: member %q named twice", k)
			}
			seen[k] = true
		}
		inner := bytes.TrimSpace(raw)
		inner = bytes.TrimSpace(inner[1 : len(inner)-1])
		if len(inner) == 0 {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, inner...)
	}
	return append(out, '}'), nil
}

// Missing lists the members of the object old, with their values, that
// the object got lacks or holds with another value: what a report encoding
// that may gain members but never lose one must keep empty. Members are
// compared as decoded JSON.
func Missing(old, got []byte) ([]string, error) {
	var o, g map[string]any
	if err := json.Unmarshal(old, &o); err != nil {
		return nil, fmt.Errorf("jsonobj: old: %w", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return nil, fmt.Errorf("jsonobj: got: %w", err)
	}
	var missing []string
	for k, v := range o {
		gv, ok := g[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		if ov, isObj := v.(map[string]any); isObj {
			gObj, _ := gv.(map[string]any)
			ob, _ := json.Marshal(ov)
			gb, _ := json.Marshal(gObj)
			sub, err := Missing(ob, gb)
			if err != nil {
				return nil, err
			}
			for _, s := range sub {
				missing = append(missing, k+"."+s)
			}
			continue
		}
		if ob, gb := fmt.Sprint(v), fmt.Sprint(gv); ob != gb {
			missing = append(missing, fmt.Sprintf("%s (was %s, is %s)", k, ob, gb))
		}
	}
	slices.Sort(missing)
	return missing, nil
}
