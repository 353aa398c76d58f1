package staging

import (
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps the keys of a TOML document to their lines and columns,
// so errors found after decoding can name the line. Paths are dotted, with array
// elements by index: "staging.1.tables.0.rows".
type positions struct {
	keys   map[string]lineCol
	blocks []int // line of each staging block's start
	starts []int // offset of each line's first byte
}

// lineCol is a 1-based position.
type lineCol struct{ line, col int }

// at is the position of a byte offset.
func (pos *positions) at(off int) lineCol {
	i := sort.SearchInts(pos.starts, off+1) - 1
	return lineCol{i + 1, off - pos.starts[i] + 1}
}

// indexPositions walks the document with go-toml's parser. A document that
// does not parse yields what was indexed before the error.
func indexPositions(data []byte) *positions {
	pos := &positions{keys: map[string]lineCol{}, starts: []int{0}}
	for i, c := range data {
		if c == '\n' {
			pos.starts = append(pos.starts, i+1)
		}
	}
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // element count of each array of tables, by path
	prefix := ""
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
				pos.keys[prefix] = pos.at(int(first.Raw.Offset))
				if e.Kind == unstable.ArrayTable && len(parts) == 1 && parts[0] == "staging" {
					pos.blocks = append(pos.blocks, pos.keys[prefix].line)
				}
			}
		case unstable.KeyValue:
			pos.keyValue(prefix, e)
		}
	}
	return pos
}

// keyValue records a key-value and, inside inline tables and arrays of
// them, its nested keys.
func (pos *positions) keyValue(prefix string, kv *unstable.Node) {
	parts, first := keyParts(kv)
	if first == nil {
		return
	}
	full := prefix
	for _, part := range parts {
		full = join(full, part)
	}
	at := pos.at(int(first.Raw.Offset))
	pos.keys[full] = at
	value := kv.Value()
	pos.nested(full, value, at)
	if full == "staging" && value.Kind == unstable.Array { // staging = [{...}, ...]
		for i := 0; ; i++ {
			el, ok := pos.keys[join(full, strconv.Itoa(i))]
			if !ok {
				break
			}
			pos.blocks = append(pos.blocks, el.line)
		}
	}
}

// nested records the keys inside an inline table or an array; an array
// element is placed at its first key, or at the array's key.
func (pos *positions) nested(path string, v *unstable.Node, at lineCol) {
	switch v.Kind {
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			pos.keyValue(path, it.Node())
		}
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); i++ {
			el := join(path, strconv.Itoa(i))
			pos.nested(el, it.Node(), at)
			if _, ok := pos.keys[el]; !ok {
				pos.keys[el] = at
				if ks, ok := firstKey(it.Node()); ok {
					pos.keys[el] = pos.at(ks)
				}
			}
		}
	}
}

// firstKey is the offset of an inline table's first key.
func firstKey(v *unstable.Node) (int, bool) {
	if v.Kind != unstable.InlineTable {
		return 0, false
	}
	it := v.Children()
	if !it.Next() {
		return 0, false
	}
	_, first := keyParts(it.Node())
	if first == nil {
		return 0, false
	}
	return int(first.Raw.Offset), true
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
		if at, ok := pos.keys[p]; ok {
			return at.line
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

// keyName names a key go-toml reported at a position, with array
// indices: "staging[1].tables[0].rows". It is the key written nearest
// before the position on its line (the key itself, or the key of a bad
// value), the deepest one on a tie.
func (pos *positions) keyName(k []string, line, col int) string {
	if len(k) == 0 {
		return ""
	}
	best, bestAt := "", lineCol{}
	for p, at := range pos.keys {
		if at.line != line || at.col > col || !strings.HasPrefix(p, k[0]) {
			continue
		}
		if best == "" || at.col > bestAt.col || (at.col == bestAt.col && (len(p) > len(best) || (len(p) == len(best) && p < best))) {
			best, bestAt = p, at
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
