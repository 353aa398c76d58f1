package jsonobj

import (
	"slices"
	"testing"
)

func TestConcat(t *testing.T) {
	type a struct {
		X int    `json:"x"`
		Y string `json:"y,omitempty"`
	}
	type b struct {
		Z []int `json:"z"`
	}
	for _, tc := range []struct {
		name string
		vs   []any
		want string
		ok   bool
	}{
		{"two objects in order", []any{a{X: 1, Y: "s"}, b{Z: []int{2}}}, `{"x":1,"y":"s","z":[2]}`, true},
		{"an empty object adds nothing", []any{struct{}{}, a{X: 1}, struct{}{}}, `{"x":1}`, true},
		{"nothing", nil, `{}`, true},
		{"a member twice", []any{a{X: 1}, a{X: 2}}, "", false},
		{"not an object", []any{a{}, []int{1}}, "", false},
		{"null", []any{(*a)(nil)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Concat(tc.vs...)
			if (err == nil) != tc.ok || (tc.ok && string(got) != tc.want) {
				t.Fatalf("Concat = %s, %v; want %s, ok %v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		name, old, got string
		want           []string
	}{
		{"gained members", `{"a":1,"b":{"c":"x"}}`, `{"a":1,"z":2,"b":{"c":"x","d":3}}`, nil},
		{"lost a member", `{"a":1,"b":2}`, `{"b":2}`, []string{"a"}},
		{"changed a value", `{"a":1}`, `{"a":2}`, []string{"a (was 1, is 2)"}},
		{"lost a nested member", `{"t":{"bytes":4}}`, `{"t":{"fetched":4}}`, []string{"t.bytes"}},
		{"lost a nested object", `{"t":{"bytes":4}}`, `{}`, []string{"t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Missing([]byte(tc.old), []byte(tc.got))
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Missing = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
