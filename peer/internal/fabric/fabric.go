//go:build libfabric

package fabric

/*
#cgo pkg-config: libfabric
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <arpa/inet.h>

typedef struct {
	struct fid_fabric *fab; struct fid_eq *eq; struct fid_domain *dom; struct fid_ep *ep; struct fid_cq *cq;
	struct fi_info *info; int own_fab; uint64_t mr_mode;
} wsf_ep;

typedef struct { struct fid_fabric *fab; struct fid_eq *eq; struct fid_pep *pep; struct fi_info *info; } wsf_listener;

typedef struct { void *dst; size_t len; void *desc; uint64_t raddr; uint64_t key; } wsf_op;

static struct fi_info *wsf_hints(const char *prov) {
	struct fi_info *h = fi_allocinfo();
	if (!h) return NULL;
	h->caps = FI_RMA | FI_READ | FI_REMOTE_READ | FI_MSG;
	h->ep_attr->type = FI_EP_MSG;
	if (prov && *prov) h->fabric_attr->prov_name = strdup(prov);
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED | FI_MR_ENDPOINT;
	h->addr_format = FI_SOCKADDR_IN;
	return h;
}

static int wsf_eq_open(struct fid_fabric *fab, struct fid_eq **eq) {
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC, .size = 16 };
	return fi_eq_open(fab, &ea, eq, NULL);
}

// wsf_wait waits for one connection-management event; errors carry the provider's reason.
static int wsf_wait(struct fid_eq *eq, uint32_t want, struct fi_eq_cm_entry *e, int timeout_ms) {
	uint32_t ev;
	ssize_t n = fi_eq_sread(eq, &ev, e, sizeof *e, timeout_ms, 0);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = {0};
		fi_eq_readerr(eq, &err, 0);
		return err.err ? -err.err : -FI_EOTHER;
	}
	if (n < 0) return (int)n;
	return ev == want ? 0 : -FI_EOTHER;
}

static int wsf_open_ep(wsf_ep *x, struct fi_info *info) {
	int r;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC, .size = 1024 };
	x->mr_mode = info->domain_attr->mr_mode;
	if ((r = wsf_eq_open(x->fab, &x->eq))) return r;
	if ((r = fi_domain(x->fab, info, &x->dom, NULL))) return r;
	if ((r = fi_cq_open(x->dom, &ca, &x->cq, NULL))) {
		ca.wait_obj = FI_WAIT_NONE;
		if ((r = fi_cq_open(x->dom, &ca, &x->cq, NULL))) return r;
	}
	if ((r = fi_endpoint(x->dom, info, &x->ep, NULL))) return r;
	if ((r = fi_ep_bind(x->ep, &x->eq->fid, 0))) return r;
	if ((r = fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV))) return r;
	return fi_enable(x->ep);
}

static void wsf_ep_close(wsf_ep *x) {
	if (!x) return;
	if (x->ep) fi_close(&x->ep->fid);
	if (x->cq) fi_close(&x->cq->fid);
	if (x->dom) fi_close(&x->dom->fid);
	if (x->eq) fi_close(&x->eq->fid);
	if (x->own_fab && x->fab) fi_close(&x->fab->fid);
	if (x->info) fi_freeinfo(x->info);
	free(x);
}

static void wsf_listener_close(wsf_listener *l) {
	if (!l) return;
	if (l->pep) fi_close(&l->pep->fid);
	if (l->eq) fi_close(&l->eq->fid);
	if (l->fab) fi_close(&l->fab->fid);
	if (l->info) fi_freeinfo(l->info);
	free(l);
}

// wsf_listen opens a passive endpoint on node with an ephemeral port.
static int wsf_listen(const char *prov, const char *node, wsf_listener **out, int *port) {
	int r;
	wsf_listener *l = calloc(1, sizeof *l);
	struct fi_info *h = wsf_hints(prov);
	if (!l || !h) { free(l); fi_freeinfo(h); return -FI_ENOMEM; }
	*out = l;
	r = fi_getinfo(FI_VERSION(1, 17), node, NULL, FI_SOURCE, h, &l->info);
	fi_freeinfo(h);
	if (r) return r;
	if ((r = fi_fabric(l->info->fabric_attr, &l->fab, NULL))) return r;
	if ((r = wsf_eq_open(l->fab, &l->eq))) return r;
	if ((r = fi_passive_ep(l->fab, l->info, &l->pep, NULL))) return r;
	if ((r = fi_pep_bind(l->pep, &l->eq->fid, 0))) return r;
	if ((r = fi_listen(l->pep))) return r;
	struct sockaddr_in sa; size_t len = sizeof sa;
	if ((r = fi_getname(&l->pep->fid, &sa, &len))) return r;
	*port = ntohs(sa.sin_port);
	return 0;
}

// wsf_accept accepts one connection on the listener's fabric.
static int wsf_accept(wsf_listener *l, int timeout_ms, wsf_ep **out) {
	int r;
	struct fi_eq_cm_entry e;
	if ((r = wsf_wait(l->eq, FI_CONNREQ, &e, timeout_ms))) return r;
	wsf_ep *x = calloc(1, sizeof *x);
	if (!x) { fi_reject(l->pep, e.info->handle, NULL, 0); fi_freeinfo(e.info); return -FI_ENOMEM; }
	*out = x;
	x->fab = l->fab;
	x->info = e.info;
	if ((r = wsf_open_ep(x, e.info))) { fi_reject(l->pep, e.info->handle, NULL, 0); return r; }
	if ((r = fi_accept(x->ep, NULL, 0))) return r;
	return wsf_wait(x->eq, FI_CONNECTED, &e, timeout_ms);
}

// wsf_connect opens its own fabric and connects to host:port.
static int wsf_connect(const char *prov, const char *host, const char *port, int timeout_ms, wsf_ep **out) {
	int r;
	struct fi_eq_cm_entry e;
	wsf_ep *x = calloc(1, sizeof *x);
	struct fi_info *h = wsf_hints(prov);
	if (!x || !h) { free(x); fi_freeinfo(h); return -FI_ENOMEM; }
	*out = x;
	x->own_fab = 1;
	r = fi_getinfo(FI_VERSION(1, 17), host, port, 0, h, &x->info);
	fi_freeinfo(h);
	if (r) return r;
	if ((r = fi_fabric(x->info->fabric_attr, &x->fab, NULL))) return r;
	if ((r = wsf_open_ep(x, x->info))) return r;
	if ((r = fi_connect(x->ep, x->info->dest_addr, NULL, 0))) return r;
	return wsf_wait(x->eq, FI_CONNECTED, &e, timeout_ms);
}

// wsf_mr_reg registers [base, base+len) with access on the endpoint's domain
// (bound to the endpoint where the provider wants it), and returns the key,
// the address a peer names it by, and the local descriptor.
static int wsf_mr_reg(wsf_ep *x, void *base, size_t len, uint64_t access, uint64_t req_key,
                      struct fid_mr **mr, uint64_t *key, uint64_t *raddr, void **desc) {
	int r;
	if ((r = fi_mr_reg(x->dom, base, len, access, 0, req_key, 0, mr, NULL))) return r;
	if (x->mr_mode & FI_MR_ENDPOINT) {
		if ((r = fi_mr_bind(*mr, &x->ep->fid, 0)) || (r = fi_mr_enable(*mr))) return r;
	}
	*key = fi_mr_key(*mr);
	*raddr = (x->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)base : 0;
	*desc = fi_mr_desc(*mr);
	return 0;
}

// wsf_probe says whether the provider offers FI_EP_MSG endpoints with RMA reads.
static int wsf_probe(const char *prov) {
	struct fi_info *h = wsf_hints(prov), *info = NULL;
	if (!h) return -FI_ENOMEM;
	int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	if (info) fi_freeinfo(info);
	return r;
}

static void wsf_mr_close(struct fid_mr *mr) { if (mr) fi_close(&mr->fid); }

static int wsf_needs_local_mr(wsf_ep *x) { return (x->mr_mode & FI_MR_LOCAL) != 0; }

static const char *wsf_prov(wsf_ep *x) { return x->info->fabric_attr->prov_name; }

// wsf_cq_wait reads completions, blocking up to timeout_ms where the CQ has a
// wait object. It returns the count read, 0 on a timeout, or a negative error
// (with the provider's reason in errbuf).
static ssize_t wsf_cq_wait(wsf_ep *x, int timeout_ms, char *errbuf, size_t errlen) {
	struct fi_cq_entry ce[64];
	ssize_t n = fi_cq_sread(x->cq, ce, 64, NULL, timeout_ms);
	if (n == -FI_ENOSYS || n == -FI_EINVAL) n = fi_cq_read(x->cq, ce, 64);
	if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(x->cq, &err, 0);
		if (errbuf) snprintf(errbuf, errlen, "%s", fi_cq_strerror(x->cq, err.prov_errno, err.err_data, NULL, 0));
		return err.err ? -err.err : -FI_EOTHER;
	}
	return n;
}

// wsf_read_batch posts one-sided reads of every op, in chunks of at most
// chunk bytes with at most window in flight, and waits for all of them. It
// stops on the first error, after timeout_ms without a completion, or when
// *cancel is set; the caller then closes the endpoint before it frees or
// unmaps any destination.
static int wsf_read_batch(wsf_ep *x, int n, wsf_op *ops, size_t chunk, int window, int timeout_ms,
                          volatile int *cancel, char *errbuf, size_t errlen) {
	int i = 0, inflight = 0, idle = 0;
	size_t off = 0;
	while (i < n || inflight) {
		while (inflight < window && i < n) {
			if (ops[i].len == off) { i++; off = 0; continue; }
			size_t len = ops[i].len - off < chunk ? ops[i].len - off : chunk;
			ssize_t s = fi_read(x->ep, (char *)ops[i].dst + off, len, ops[i].desc, 0, ops[i].raddr + off, ops[i].key, NULL);
			if (s == -FI_EAGAIN) break;
			if (s) { snprintf(errbuf, errlen, "fi_read: %s", fi_strerror((int)-s)); return (int)s; }
			off += len; inflight++;
		}
		if (!inflight) continue;
		if (*cancel) return -FI_ECANCELED;
		ssize_t got = wsf_cq_wait(x, 50, errbuf, errlen);
		if (got < 0) return (int)got;
		if (got == 0) {
			if ((idle += 50) >= timeout_ms) { snprintf(errbuf, errlen, "no completion for %d ms", timeout_ms); return -FI_ETIMEDOUT; }
			continue;
		}
		idle = 0;
		inflight -= (int)got;
	}
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/containerd/errdefs"
)

// Built says whether this build has the libfabric binding.
const Built = true

// callErr is a libfabric call that failed (r, a negative fi_errno, not 0),
// classified as the peer's or the wire's.
func callErr(op string, r C.int, detail string) error {
	if r == 0 {
		return nil
	}
	msg := fmt.Sprintf("libfabric %s: %s (%d)", op, C.GoString(C.fi_strerror(-r)), int(r))
	if detail != "" {
		msg += ": " + detail
	}
	return fmt.Errorf("%s: %w", msg, errdefs.ErrUnavailable)
}

// EP is one connected FI_EP_MSG endpoint: one rail.
type EP struct{ x *C.wsf_ep }

// Listener is a passive endpoint that accepts a session's rails.
type Listener struct{ l *C.wsf_listener }

func cstr(s string) (*C.char, func()) {
	c := C.CString(s)
	return c, func() { C.free(unsafe.Pointer(c)) }
}

func millis(d time.Duration) C.int { return C.int(max(d.Milliseconds(), 1)) }

// Probe checks that the provider ("" for libfabric's choice) offers
// connected endpoints with one-sided reads; it also pays libfabric's
// one-time discovery of its providers.
func Probe(provider string) error {
	cp, fp := cstr(provider)
	defer fp()
	return callErr("probe provider "+provider, C.wsf_probe(cp), "")
}

// Listen opens a passive endpoint on node (an IP address of this host).
func Listen(provider, node string) (*Listener, int, error) {
	cp, fp := cstr(provider)
	defer fp()
	cn, fn := cstr(node)
	defer fn()
	var l *C.wsf_listener
	var port C.int
	if r := C.wsf_listen(cp, cn, &l, &port); r != 0 {
		C.wsf_listener_close(l)
		return nil, 0, callErr("listen "+provider+" on "+node, r, "")
	}
	return &Listener{l}, int(port), nil
}

// Accept accepts one rail.
func (l *Listener) Accept(timeout time.Duration) (*EP, error) {
	var x *C.wsf_ep
	if r := C.wsf_accept(l.l, millis(timeout), &x); r != 0 {
		C.wsf_ep_close(x)
		return nil, callErr("accept", r, "")
	}
	return &EP{x}, nil
}

// Close closes the passive endpoint.
func (l *Listener) Close() { C.wsf_listener_close(l.l) }

// Provider is the provider the listener runs on.
func (l *Listener) Provider() string { return C.GoString(l.l.info.fabric_attr.prov_name) }

// Connect connects a rail to host:port.
func Connect(provider, host string, port int, timeout time.Duration) (*EP, error) {
	cp, fp := cstr(provider)
	defer fp()
	ch, fh := cstr(host)
	defer fh()
	cport, fport := cstr(strconv.Itoa(port))
	defer fport()
	var x *C.wsf_ep
	if r := C.wsf_connect(cp, ch, cport, millis(timeout), &x); r != 0 {
		C.wsf_ep_close(x)
		return nil, callErr("connect "+provider+" "+host+":"+strconv.Itoa(port), r, "")
	}
	return &EP{x}, nil
}

// Provider is the provider the endpoint runs on.
func (e *EP) Provider() string { return C.GoString(C.wsf_prov(e.x)) }

// Close closes the endpoint; no read lands in a destination after.
func (e *EP) Close() { C.wsf_ep_close(e.x) }

// MR is one registration: its key, the address a peer names it by, and
// the local descriptor.
type MR struct {
	mr    *C.struct_fid_mr
	Key   uint64
	RAddr uint64
	Desc  unsafe.Pointer
}

// Access flags of a registration.
const (
	AccessRemoteRead = C.FI_REMOTE_READ
	AccessLocalRead  = C.FI_READ
)

// Register registers mem, which must lie outside the Go heap (a mapping).
// reqKey is used where the provider lets the caller choose keys.
func (e *EP) Register(mem []byte, access uint64, reqKey uint64) (*MR, error) {
	if len(mem) == 0 {
		return nil, errors.New("libfabric: empty registration")
	}
	m := &MR{}
	var key, raddr C.uint64_t
	var desc unsafe.Pointer
	r := C.wsf_mr_reg(e.x, unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem)), C.uint64_t(access),
		C.uint64_t(reqKey), &m.mr, &key, &raddr, &desc)
	if r != 0 {
		C.wsf_mr_close(m.mr)
		return nil, callErr("register", r, "")
	}
	m.Key, m.RAddr, m.Desc = uint64(key), uint64(raddr), desc
	return m, nil
}

// Close deregisters the memory.
func (m *MR) Close() { C.wsf_mr_close(m.mr) }

// NeedsLocalMR says whether destinations must be registered too (FI_MR_LOCAL).
func (e *EP) NeedsLocalMR() bool { return C.wsf_needs_local_mr(e.x) != 0 }

// ReadOp is one one-sided read: len(Dst) bytes from (RAddr, Key).
type ReadOp struct {
	Dst   []byte // inside a mapping, never the Go heap
	Desc  unsafe.Pointer
	RAddr uint64
	Key   uint64
}

// ReadBatch posts the reads in chunks with a window in flight and waits for
// them, on the calling goroutine's locked OS thread. cancel stops it. After
// an error the endpoint must be closed before any destination is unmapped.
func (e *EP) ReadBatch(ops []ReadOp, chunk, window int, timeout time.Duration, cancel *atomic.Int32) error {
	if len(ops) == 0 {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cops := unsafe.Slice((*C.wsf_op)(C.malloc(C.size_t(len(ops))*C.size_t(unsafe.Sizeof(C.wsf_op{})))), len(ops))
	defer C.free(unsafe.Pointer(&cops[0]))
	for i, op := range ops {
		cops[i] = C.wsf_op{dst: unsafe.Pointer(unsafe.SliceData(op.Dst)), len: C.size_t(len(op.Dst)), desc: op.Desc,
			raddr: C.uint64_t(op.RAddr), key: C.uint64_t(op.Key)}
	}
	var errbuf [256]C.char
	r := C.wsf_read_batch(e.x, C.int(len(ops)), &cops[0], C.size_t(chunk), C.int(window), millis(timeout),
		(*C.int)(unsafe.Pointer(cancel)), &errbuf[0], C.size_t(len(errbuf)))
	return callErr("read", r, C.GoString(&errbuf[0]))
}

// Progress waits up to timeout for completions on the endpoint, driving the
// provider where the target side must poll.
func (e *EP) Progress(timeout time.Duration) error {
	var errbuf [256]C.char
	if n := C.wsf_cq_wait(e.x, millis(timeout), &errbuf[0], C.size_t(len(errbuf))); n < 0 {
		return callErr("progress", C.int(n), C.GoString(&errbuf[0]))
	}
	return nil
}
