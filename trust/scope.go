package trust

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
)

// hostRE is a registry host with an optional port, as a scope names it.
var hostRE = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]+)?$`)

// validScope checks a docker transport scope: "" (the transport's
// default), host[:port], *.domain, or a fully qualified
// host/namespace, host/repo, host/repo:tag or host/repo@digest (never
// normalised: the scope "busybox" is refused,
// "docker.io/library/busybox" is one).
func validScope(scope string) error {
	switch {
	case scope == "":
		return nil
	case strings.HasPrefix(scope, "*."):
		if !hostRE.MatchString(scope[2:]) || strings.Contains(scope[2:], ":") {
			return errors.New("a wildcard scope is *.domain, without a port or path")
		}
		return nil
	case !strings.Contains(scope, "/"):
		if !hostRE.MatchString(scope) {
			return errors.New("not a registry host[:port]")
		}
		return nil
	}
	named, err := reference.ParseNamed(scope)
	if err != nil {
		return fmt.Errorf("not fully qualified host/repository[:tag]: %v", err)
	}
	if named.String() != scope {
		return fmt.Errorf("not fully qualified (it reads as %s)", named.String())
	}
	_, tagged := named.(reference.Tagged)
	if _, digested := named.(reference.Digested); tagged && digested {
		return errors.New("a scope names a tag or a digest, not both")
	}
	return nil
}

// Match is the requirement list that applies to a reference, with the
// scope it came from ("default" for the policy's default).
type Match struct {
	Scope        string
	Requirements []Requirement
}

// For is what applies to ref (a registry reference, host/repo[:tag]
// [@digest]): the most specific docker scope, in containers-policy.json's
// order: host/repo:tag or host/repo@digest, host/repo, each parent
// namespace, host[:port], *.domain from the longest, the transport's ""
// scope, then default.
func (p *Policy) For(ref reference.Named) Match {
	repo := ref.Name()
	var tries []string
	if t, ok := ref.(reference.Tagged); ok {
		tries = append(tries, repo+":"+t.Tag())
	} else if d, ok := ref.(reference.Digested); ok {
		tries = append(tries, repo+"@"+d.Digest().String())
	}
	for n := repo; ; {
		tries = append(tries, n)
		i := strings.LastIndexByte(n, '/')
		if i < 0 {
			break
		}
		n = n[:i]
	}
	host := reference.Domain(ref)
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	for labels := strings.Split(host, "."); len(labels) > 1; labels = labels[1:] {
		tries = append(tries, "*."+strings.Join(labels[1:], "."))
	}
	tries = append(tries, "")
	for _, s := range tries {
		if reqs, ok := p.Docker[s]; ok {
			return Match{Scope: s, Requirements: reqs}
		}
	}
	return Match{Scope: "default", Requirements: p.Default}
}
