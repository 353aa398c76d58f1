package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"github.com/weightsnap/weightsnap/internal/netfail"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// ExpandPeers turns configured peers into addresses: each entry is
// host:port or host (DefaultPort), where host is an IP address or a DNS name
// with one or many addresses (a Kubernetes headless Service); entries may
// be comma-separated. The order is kept and repeats dropped.
func ExpandPeers(ctx context.Context, peers []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, entry := range peers {
		for p := range strings.SplitSeq(entry, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			host, port, err := net.SplitHostPort(p)
			if err != nil {
				host, port = strings.Trim(p, "[]"), strconv.Itoa(DefaultPort)
			}
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				return nil, badInput("peer %q: bad port", p)
			}
			if net.ParseIP(host) != nil {
				add(net.JoinHostPort(host, port))
				continue
			}
			ips, err := net.DefaultResolver.LookupHost(ctx, host)
			if err != nil {
				log.G(ctx).WithError(err).WithField("peer", host).Warn("peer: cannot resolve")
				continue
			}
			for _, ip := range ips {
				add(net.JoinHostPort(ip, port))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no peer address (from %q): %w", peers, errdefs.ErrNotFound)
	}
	return out, nil
}

// FetchReport says what a fetch did. Transfer's Endpoint is the peer the
// fetch finished with; Peers every peer it used, in order.
type FetchReport struct {
	Request string   `json:"request"`
	Tensors []string `json:"tensors,omitempty"` // the patterns of a subset
	store.TransferReport
	Peers     []string `json:"peers,omitempty"`
	Failovers int      `json:"failovers"`
	Restarts  int      `json:"restarts"`
	Seconds   float64  `json:"seconds"`
}

// MarshalJSON is the report's encoding, `weightsnap peer fetch --json`: the
// fields, the identity's hex under "id" and the endpoint under "peer".
func (r FetchReport) MarshalJSON() ([]byte, error) {
	type fields FetchReport
	return jsonobj.Concat(fields(r), struct {
		Hex  string `json:"id"`
		Peer string `json:"peer,omitempty"`
	}{r.ID.Hex(), r.Endpoint})
}

// newFetcher picks the first peer that serves request, in the order of
// orderSources (holders, then builders, with the fewest children first),
// and reads its manifest. It passes over the peers remembered as down:
// they are asked again once their time runs out. With keep the session
// stays open for the fetch; otherwise the fetch opens a new one on the
// same peer first.
func newFetcher(ctx context.Context, peers []string, request wire.Request, o FetchOptions, keep bool) (*fetcher, error) {
	o.Client = o.Client.withDefaults()
	if o.Rails <= 0 {
		o.Rails = AutoRails()
	}
	if o.Mode == "" {
		o.Mode = ModeTCP
	}
	if o.Patience <= 0 {
		o.Patience = DefaultPatience
	}
	if o.Mode == ModeRMA && !fabric.Built {
		return nil, unsupported(ModeRMA, fabric.Missing)
	}
	if err := checkPatterns(o.Tensors); err != nil {
		return nil, err
	}
	if o.Client.Down == nil {
		o.Client.Down = NewDownPeers()
	}
	var absent map[string]bool
	if request.Export == "" && len(peers) > 1 {
		peers, absent = orderSources(ctx, o.Client, peers, request.ID)
	}
	f := &fetcher{o: o, src: newSources(peers, request, o), stats: fetchStats{onProgress: o.Progress}}
	var errs []error
	var away []string
	for i, addr := range peers {
		if err := o.Client.Down.passedOver(addr); err != nil {
			errs, away = append(errs, err), append(away, addr)
			continue
		}
		if absent[addr] {
			errs = append(errs, &Error{Addr: addr, Err: fmt.Errorf("listed without %s: %w", request, errdefs.ErrNotFound)})
			continue
		}
		cs, err := openSession(ctx, o.Client, addr, request)
		if err == nil {
			if err = f.src.eligible(addr, cs.manifest); err != nil {
				cs.close()
			}
		}
		if err != nil {
			errs = append(errs, err)
			if netfail.Unreachable(err) {
				away = append(away, addr)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		f.base, f.identity, f.src.base, f.src.last = cs.manifest, cs.manifest.Identity, cs.manifest, i-1
		if keep {
			f.src.sess, f.src.last = cs, i
		} else {
			cs.close()
		}
		if len(o.Tensors) > 0 {
			if f.subset, f.identity, err = planSubset(f.base, o.Tensors); err != nil {
				f.src.closeSession()
				return nil, err
			}
		}
		return f, nil
	}
	if allNotFound(errs) {
		return nil, fmt.Errorf("no peer of %d holds %s: %w", len(peers), request, errdefs.ErrNotFound)
	}
	return nil, &noPeerError{request: request, errs: errs, away: away}
}

// noPeerError is a selection no peer served: each peer's failure, and the
// peers that could not be reached or did not answer (down, black-holed).
type noPeerError struct {
	request wire.Request
	errs    []error
	away    []string
}

func (e *noPeerError) Error() string {
	return "no peer serves " + e.request.String() + ": " + errors.Join(e.errs...).Error()
}

// Unwrap returns each peer's failure.
func (e *noPeerError) Unwrap() []error { return e.errs }

// unreachablePeers are the peers err says could not be reached.
func unreachablePeers(err error) []string {
	var np *noPeerError
	if errors.As(err, &np) {
		return np.away
	}
	return nil
}

func allNotFound(errs []error) bool {
	for _, e := range errs {
		if !errdefs.IsNotFound(e) {
			return false
		}
	}
	return len(errs) > 0
}

// Fetch materialises request (an identity digest, a manifest digest or a
// staged id of an exported directory) from the first of peers that serves it, into the store, and
// returns a lease on it. Every unit's BLAKE3 is checked as it lands, every
// file's digests once written, before publication: on any mismatch nothing
// becomes READY. On a failure of a peer or the wire the fetch resumes, with
// what it has not verified yet, from the next peer (or the same one, once
// it answers again). An identity the store holds already is that artifact,
// once o.Hit accepts it.
func Fetch(ctx context.Context, d *store.Domain, peers []string, request string, o FetchOptions) (*store.Lease, *FetchReport, error) {
	q, err := wire.ParseRequest(request)
	if err != nil {
		return nil, nil, err
	}
	var mo store.MaterialiseOptions
	if q.Export == "" && len(o.Tensors) == 0 {
		mo.ID = q.ID // an identity this store may already have: no peer needed
	}
	rep := &FetchReport{Request: request, Tensors: o.Tensors}
	var f *fetcher
	plan := func(ctx context.Context) (artifact.Identity, artifact.Producer, error) {
		addrs, err := ExpandPeers(ctx, peers)
		if err != nil {
			return artifact.Identity{}, nil, err
		}
		if f, err = newFetcher(ctx, addrs, q, o, true); err != nil {
			return artifact.Identity{}, nil, err
		}
		f.scratch = d.Root()
		rep.ID, _ = f.identity.ID()
		if o.Admit != nil {
			if err := o.Admit(ctx, rep.ID, f); err != nil {
				return artifact.Identity{}, nil, err
			}
		}
		return f.identity, f, nil
	}
	lease, m, err := d.Materialise(ctx, plan, mo)
	if err == nil && !m.Planned && o.Hit != nil {
		if herr := o.Hit(ctx, lease.ID); herr != nil {
			lease.Close()
			lease, m, err = d.Materialise(ctx, plan, store.MaterialiseOptions{})
			if err != nil {
				err = fmt.Errorf("%w; the store's copy: %w", err, herr)
			}
		}
	}
	if f != nil {
		f.src.closeSession()
		ss := f.stats.sessions
		rep.Peers, rep.Failovers, rep.Restarts = ss.Peers, ss.Failovers, ss.Restarts
	}
	if err != nil {
		if !m.Planned {
			return nil, nil, err
		}
		return nil, rep, err
	}
	rep.TransferReport = m.Report(lease)
	rep.Seconds = m.Total.Seconds()
	return lease, rep, nil
}
