package staging

import (
	"strconv"
	"time"
)

// fastLedger decodes a ledger as encodeLedger writes it, without
// reflection: objects of the ledger's own keys, each once; strings of
// printable ASCII without escapes; integers; times as encoding/json reads
// them. ok is false for anything else (an escape, another key, a float, a
// duplicate key, trailing data), and the caller decodes with encoding/json,
// which also gives the error: where ok is true the result is encoding/json's
// (FuzzLedger checks it).
func fastLedger(data []byte) (l *Ledger, ok bool) {
	d := ledgerDec{b: data}
	l = &Ledger{}
	if !d.object(func(key string) bool { return d.ledgerField(l, key) }) {
		return nil, false
	}
	d.space()
	return l, d.i == len(d.b)
}

type ledgerDec struct {
	b []byte
	i int
}

func (d *ledgerDec) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\n', '\t', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c after any space.
func (d *ledgerDec) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field for each key (which reads
// the value); a key seen twice fails.
func (d *ledgerDec) object(field func(key string) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen []string
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		for _, s := range seen {
			if s == key {
				return false
			}
		}
		seen = append(seen, key)
		if !field(key) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

// str reads a string of printable ASCII without escapes.
func (d *ledgerDec) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// num reads an integer literal as JSON writes it: -?(0|[1-9][0-9]*).
func (d *ledgerDec) num() ([]byte, bool) {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i > digits+1) {
		return nil, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return nil, false
		}
	}
	return d.b[start:d.i], true
}

func (d *ledgerDec) int(v *int64) bool {
	raw, ok := d.num()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	*v = n
	return err == nil
}

func (d *ledgerDec) uint(v *uint64) bool {
	raw, ok := d.num()
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	*v = n
	return err == nil
}

func (d *ledgerDec) strTo(v *string) bool {
	s, ok := d.str()
	*v = s
	return ok
}

// time reads a time as time.Time's UnmarshalJSON does.
func (d *ledgerDec) time(t *time.Time) bool {
	d.space()
	start := d.i
	if _, ok := d.str(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

// null consumes a null.
func (d *ledgerDec) null() bool {
	d.space()
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// array reads [elem, ...], or null (nil is true then).
func (d *ledgerDec) array(elem func() bool) (isNull, ok bool) {
	if d.null() {
		return true, true
	}
	if !d.byte('[') {
		return false, false
	}
	if d.byte(']') {
		return false, true
	}
	for {
		if !elem() {
			return false, false
		}
		if d.byte(',') {
			continue
		}
		return false, d.byte(']')
	}
}

func (d *ledgerDec) ledgerField(l *Ledger, key string) bool {
	switch key {
	case "schema":
		var n int64
		ok := d.int(&n)
		l.Schema = int(n)
		return ok && int64(l.Schema) == n
	case "id":
		return d.strTo(&l.ID)
	case "node":
		return d.strTo(&l.Node)
	case "kind":
		return d.strTo(&l.Kind)
	case "src":
		return d.strTo(&l.Src)
	case "dst":
		return d.strTo(&l.Dst)
	case "verify":
		s, ok := d.str()
		l.Verify = Verify(s)
		return ok
	case "state":
		return d.strTo(&l.State)
	case "error":
		return d.strTo(&l.Error)
	case "staged_at":
		return d.time(&l.StagedAt)
	case "last_used":
		return d.time(&l.LastUsed)
	case "bytes":
		return d.int(&l.Bytes)
	case "entries":
		es := []Entry{}
		isNull, ok := d.array(func() bool {
			var e Entry
			if !d.object(func(key string) bool { return d.entryField(&e, key) }) {
				return false
			}
			es = append(es, e)
			return true
		})
		if !isNull {
			l.Entries = es
		}
		return ok
	}
	return false
}

func (d *ledgerDec) entryField(e *Entry, key string) bool {
	switch key {
	case "path":
		return d.strTo(&e.Path)
	case "kind":
		return d.strTo(&e.Kind)
	case "size":
		return d.int(&e.Size)
	case "target":
		return d.strTo(&e.Target)
	case "digest":
		return d.strTo(&e.Digest)
	case "sample":
		return d.strTo(&e.Sample)
	case "verify":
		s, ok := d.str()
		e.Verify = Verify(s)
		return ok
	case "dev":
		return d.uint(&e.Dev)
	case "ino":
		return d.uint(&e.Ino)
	case "mtime_ns":
		return d.int(&e.MtimeNs)
	case "ranges":
		rs := []RangeRecord{}
		isNull, ok := d.array(func() bool {
			var r RangeRecord
			if !d.object(func(key string) bool { return d.rangeField(&r, key) }) {
				return false
			}
			rs = append(rs, r)
			return true
		})
		if !isNull {
			e.Ranges = rs
		}
		return ok
	}
	return false
}

func (d *ledgerDec) rangeField(r *RangeRecord, key string) bool {
	switch key {
	case "table":
		return d.strTo(&r.Table)
	case "rows":
		return d.byte('[') && d.int(&r.Rows[0]) && d.byte(',') && d.int(&r.Rows[1]) && d.byte(']')
	case "offset":
		return d.int(&r.Offset)
	case "length":
		return d.int(&r.Length)
	case "digest":
		return d.strTo(&r.Digest)
	}
	return false
}
