package artifact

import (
	"encoding/json"
	"errors"
	"io"
)

// DecodeStrictJSON decodes exactly one JSON value from r into v, refusing
// fields v does not have and anything but white space after the value.
func DecodeStrictJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
