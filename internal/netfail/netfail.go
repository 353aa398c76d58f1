// Package netfail classifies network failures: whether an error says a
// remote endpoint could not be reached or heard from in time (down,
// refusing, black-holed, unresolvable, hung up), or that its TLS identity
// was refused. It looks only at the standard library's error types, so a
// weight peer's, a registry's and resolution's classifications agree.
package netfail

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// away are the errnos of an endpoint that is down or cannot be reached.
var away = []error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.EHOSTUNREACH, syscall.EHOSTDOWN, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT,
}

// Unreachable reports whether err says the endpoint could not be reached
// or did not answer: a refused, reset or aborted connection, an
// unreachable host or network, a dial that failed, a name that did not
// resolve (*net.DNSError), a timeout (a net.Error that says so,
// os.ErrDeadlineExceeded, context.DeadlineExceeded), or a connection that
// ended before the answer did (io.EOF, io.ErrUnexpectedEOF). A TLS refusal
// (TLS) is not: the endpoint answered, with an identity this node does not
// trust or that refused this node's.
func Unreachable(err error) bool {
	if err == nil || TLS(err) {
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	for _, e := range away {
		if errors.Is(err, e) {
			return true
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// TLS reports whether err is a TLS refusal: a certificate that does not
// verify (unknown authority, expired, another host's name), an endpoint
// that does not speak TLS, or an alert the endpoint sent (it refused this
// node's certificate, or the handshake).
func TLS(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		op       *net.OpError
	)
	return err != nil && (errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) ||
		errors.As(err, &op) && op.Op == "remote error") // crypto/tls's received alert
}
