// Package readme runs the README's shell blocks as written, on a node of their own (a private mount
// and network namespace with temporary /etc, /run and /var/lib), so a README command that stops
// working fails `make test`. The test is readme_test.go; sandbox.sh is the node.
package readme
