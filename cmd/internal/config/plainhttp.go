package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
)

// PlainHTTP is [resolve] plain_http, and the CLI's --plain-http: true talks
// plain HTTP to every registry, false to none, and a list of registries
// (host[:port], as references name them) to those alone, so a local
// registry and an HTTPS one work in one command:
//
//	plain_http = true
//	plain_http = ["127.0.0.1:5500"]
//	--plain-http, --plain-http=127.0.0.1:5500,localhost:5000
type PlainHTTP struct {
	All   bool
	Hosts []string
}

// UnmarshalTOML reads a boolean or an array of strings.
func (p *PlainHTTP) UnmarshalTOML(data []byte) error {
	var v struct{ V any }
	if err := toml.Unmarshal(append([]byte("V = "), data...), &v); err != nil {
		return fmt.Errorf("plain_http: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	*p = PlainHTTP{}
	switch x := v.V.(type) {
	case bool:
		p.All = x
		return nil
	case []any:
		p.Hosts = []string{}
		for _, h := range x {
			s, ok := h.(string)
			if !ok {
				return fmt.Errorf("plain_http: %v is not a string: want true, false or a list of registry hosts: %w", h, errdefs.ErrInvalidArgument)
			}
			p.Hosts = append(p.Hosts, s)
		}
		return nil
	}
	return fmt.Errorf("plain_http = %s: want true, false or a list of registry hosts: %w", strings.TrimSpace(string(data)), errdefs.ErrInvalidArgument)
}

// MarshalTOML writes the boolean, or the array when hosts are named.
func (p PlainHTTP) MarshalTOML() ([]byte, error) {
	if p.All || len(p.Hosts) == 0 {
		return []byte(strconv.FormatBool(p.All)), nil
	}
	quoted := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		quoted[i] = strconv.Quote(h)
	}
	return []byte("[" + strings.Join(quoted, ", ") + "]"), nil
}

// String is the flag's value: true, false or the hosts, comma-separated.
func (p *PlainHTTP) String() string {
	if p.All || len(p.Hosts) == 0 {
		return strconv.FormatBool(p.All)
	}
	return strings.Join(p.Hosts, ",")
}

// Set reads the flag's value: true or false, else registry hosts,
// comma-separated.
func (p *PlainHTTP) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		*p = PlainHTTP{All: b}
		return nil
	}
	*p = PlainHTTP{}
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			p.Hosts = append(p.Hosts, h)
		}
	}
	return p.validate()
}

// Type names the flag's value in help.
func (p *PlainHTTP) Type() string { return "[=HOST,...]" }

// validate checks that each host is host[:port], not a URL or a path.
func (p *PlainHTTP) validate() error {
	for _, h := range p.Hosts {
		if h == "" || strings.ContainsAny(h, "/ \t") {
			return fmt.Errorf("plain_http host %q: want host[:port] as a reference names it (127.0.0.1:5500, localhost:5000): %w", h, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
