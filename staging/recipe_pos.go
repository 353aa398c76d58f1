package staging

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps the keys of a TOML document to their lines, so errors
// found after decoding can name the line. Paths are dotted, with array
// elements by index: "staging.1.tables.0.rows".
type positions struct {
	keys   map[string]int
	blocks []int // line of each staging block's start
}

// indexPositions walks the document with go-toml's parser. A document that
// does not parse yields what was indexed before the error.
func indexPositions(data []byte) *positions {
	pos := &positions{keys: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // element count of each array of tables, by path
	prefix := ""
	line := func(n *unstable.Node) int { return p.Shape(n.Raw).Start.Line }
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, first := keyParts(e)
			prefix = ""
			for i, part := range parts {
				prefix = join(prefix, part)
				n, isArray := arrays[prefix]
				if e.Kind == unstable.ArrayTable && i == len(parts)-1 {
					arrays[prefix] = n + 1
					n, isArray = n+1, true
				}
				if isArray {
					prefix = join(prefix, strconv.Itoa(n-1))
				}
			}
			if first != nil {
				pos.keys[prefix] = line(first)
				if e.Kind == unstable.ArrayTable && len(parts) == 1 && parts[0] == "staging" {
					pos.blocks = append(pos.blocks, line(first))
				}
			}
		case unstable.KeyValue:
			pos.keyValue(&p, prefix, e)
		}
	}
	return pos
}

// keyValue records a key-value and, inside inline tables and arrays of
// them, its nested keys.
func (pos *positions) keyValue(p *unstable.Parser, prefix string, kv *unstable.Node) {
	parts, first := keyParts(kv)
	if first == nil {
		return
	}
	full := prefix
	for _, part := range parts {
		full = join(full, part)
	}
	ln := p.Shape(first.Raw).Start.Line
	pos.keys[full] = ln
	value := kv.Value()
	if full == "staging" && value.Kind == unstable.Array { // staging = [{...}, ...]
		for it := value.Children(); it.Next(); {
			pos.blocks = append(pos.blocks, p.Shape(it.Node().Raw).Start.Line)
		}
		if len(pos.blocks) == 0 {
			pos.blocks = append(pos.blocks, ln)
		}
	}
	pos.nested(p, full, value, ln)
}

func (pos *positions) nested(p *unstable.Parser, path string, v *unstable.Node, ln int) {
	switch v.Kind {
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			pos.keyValue(p, path, it.Node())
		}
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); i++ {
			el := join(path, strconv.Itoa(i))
			if _, ok := pos.keys[el]; !ok {
				pos.keys[el] = ln
			}
			pos.nested(p, el, it.Node(), ln)
		}
	}
}

// keyParts returns a table header's or key-value's dotted key and its
// first key node.
func keyParts(n *unstable.Node) ([]string, *unstable.Node) {
	var parts []string
	var first *unstable.Node
	for it := n.Key(); it.Next(); {
		if first == nil {
			first = it.Node()
		}
		parts = append(parts, string(it.Node().Data))
	}
	return parts, first
}

func join(prefix, part string) string {
	if prefix == "" {
		return part
	}
	return prefix + "." + part
}

// line is the line of key ("verify", "tables[0].rows") in block i, or of
// the nearest enclosing element that is written down, or of the block.
func (pos *positions) line(block int, key string) int {
	p := "staging." + strconv.Itoa(block) + "." + strings.NewReplacer("[", ".", "]", "").Replace(key)
	for {
		if ln, ok := pos.keys[p]; ok {
			return ln
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if block < len(pos.blocks) {
		return pos.blocks[block]
	}
	return 0
}

// keyName names a key go-toml reported at a line, with array indices:
// "staging[1].tables[0].rows".
func (pos *positions) keyName(k []string, line int) string {
	if len(k) == 0 {
		return ""
	}
	best := ""
	for p, ln := range pos.keys {
		if ln == line && (p == k[len(k)-1] || strings.HasSuffix(p, "."+k[len(k)-1])) && (best == "" || p < best) {
			best = p
		}
	}
	if best == "" {
		return strings.Join(k, ".")
	}
	var b strings.Builder
	for i, part := range strings.Split(best, ".") {
		if _, err := strconv.Atoi(part); err == nil && i > 0 {
			b.WriteString("[" + part + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}
