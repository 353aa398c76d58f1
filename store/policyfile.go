package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
)

// PolicyChange is one field of a domain's policy that an overlay changes.
// Field is the key of domain-policy.json and of the configuration file's
// [store] table; Old and New are the values written for people.
type PolicyChange struct {
	Field string `json:"field"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// String is the change as "field old -> new".
func (c PolicyChange) String() string { return c.Field + " " + c.Old + " -> " + c.New }

// PolicyKeys are the keys of domain-policy.json, one per field of Policy,
// in the order of its fields.
func PolicyKeys() []string {
	t := reflect.TypeFor[Policy]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = policyKey(t.Field(i))
	}
	return keys
}

func policyKey(f reflect.StructField) string {
	key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return key
}

// Overlay is p with the fields that keys name taken from over, and the
// fields whose values that changes, in the order of Policy's fields.
// A key that names no field is errdefs.ErrInvalidArgument.
// The result is not validated.
func (p Policy) Overlay(over Policy, keys []string) (Policy, []PolicyChange, error) {
	all := PolicyKeys()
	for _, k := range keys {
		if !slices.Contains(all, k) {
			return p, nil, fmt.Errorf("policy: unknown field %q: %w", k, errdefs.ErrInvalidArgument)
		}
	}
	out := p
	var changes []PolicyChange
	cur, next := reflect.ValueOf(&out).Elem(), reflect.ValueOf(over)
	for i, key := range all {
		if !slices.Contains(keys, key) || cur.Field(i).Equal(next.Field(i)) {
			continue
		}
		changes = append(changes, PolicyChange{Field: key, Old: policyValue(cur.Field(i)), New: policyValue(next.Field(i))})
		cur.Field(i).Set(next.Field(i))
	}
	return out, changes, nil
}

// policyValue writes a policy field's value for people: sizes with a unit.
func policyValue(v reflect.Value) string {
	if s, ok := v.Interface().(bytefmt.Size); ok {
		return bytefmt.IEC(int64(s))
	}
	return fmt.Sprint(v.Interface())
}

// ReadPolicy is the policy recorded in the domain at root, read without
// opening the domain, taking its locks or creating anything there.
// A root that holds no store is errdefs.ErrNotFound.
func ReadPolicy(root string) (Policy, error) {
	p := filepath.Join(root, fileDomainPolicy)
	raw, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Policy{}, fmt.Errorf("no store at %s: %w", root, errdefs.ErrNotFound)
	}
	if err != nil {
		return Policy{}, fmt.Errorf("read %s: %w", p, err)
	}
	pol := DefaultPolicy() // a field the file lacks keeps its default, as Open has it
	if err := json.Unmarshal(raw, &pol); err != nil {
		return Policy{}, fmt.Errorf("%s is corrupt: %w: %w", p, err, errdefs.ErrDataLoss)
	}
	return pol, nil
}
