package staging

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// encodeLedger is json.MarshalIndent(l, "", " "), byte for byte, with the
// entries (all but a few hundred bytes of a big lane's ledger, rewritten by
// every run, a no-op included) appended directly instead of through
// reflection and a second, indenting pass. An entry with row ranges goes
// through encoding/json.
func encodeLedger(l *Ledger) ([]byte, error) {
	head := *l
	head.Entries = nil
	raw, err := json.MarshalIndent(&head, "", " ")
	if err != nil {
		return nil, err
	}
	if l.Entries == nil {
		return raw, nil
	}
	const tail = "null\n}"
	if !bytes.HasSuffix(raw, []byte(tail)) {
		return json.MarshalIndent(l, "", " ")
	}
	// An entry takes up to about 400 bytes: sized once, not grown.
	b := make([]byte, 0, len(raw)+400*len(l.Entries))
	b = append(append(b, raw[:len(raw)-len(tail)]...), '[')
	for i := range l.Entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n  "...)
		if b, err = appendEntry(b, &l.Entries[i]); err != nil {
			return nil, err
		}
	}
	if len(l.Entries) > 0 {
		b = append(b, "\n "...)
	}
	return append(b, "]\n}"...), nil
}

// appendEntry appends e as json.MarshalIndent renders an element of the
// ledger's entries.
func appendEntry(b []byte, e *Entry) ([]byte, error) {
	if len(e.Ranges) > 0 {
		raw, err := json.MarshalIndent(e, "  ", " ")
		return append(b, raw...), err
	}
	b = append(b, "{\n   \"path\": "...)
	b = appendJSONString(b, e.Path)
	b = append(b, ",\n   \"kind\": "...)
	b = appendJSONString(b, e.Kind)
	if e.Size != 0 {
		b = strconv.AppendInt(append(b, ",\n   \"size\": "...), e.Size, 10)
	}
	for _, f := range [...]struct{ key, v string }{
		{",\n   \"target\": ", e.Target}, {",\n   \"digest\": ", e.Digest},
		{",\n   \"sample\": ", e.Sample}, {",\n   \"verify\": ", string(e.Verify)},
	} {
		if f.v != "" {
			b = appendJSONString(append(b, f.key...), f.v)
		}
	}
	if e.Dev != 0 {
		b = strconv.AppendUint(append(b, ",\n   \"dev\": "...), e.Dev, 10)
	}
	if e.Ino != 0 {
		b = strconv.AppendUint(append(b, ",\n   \"ino\": "...), e.Ino, 10)
	}
	if e.MtimeNs != 0 {
		b = strconv.AppendInt(append(b, ",\n   \"mtime_ns\": "...), e.MtimeNs, 10)
	}
	return append(b, "\n  }"...), nil
}

// appendJSONString appends s quoted as encoding/json quotes it: printable
// ASCII other than the characters it escapes is copied, anything else goes
// through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(s) // a string always encodes
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
