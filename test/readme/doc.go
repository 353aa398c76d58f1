// Package readme runs the shell blocks of the README and docs/ as written, on a node of their own (a
// private mount and network namespace with temporary /etc, /run and /var/lib), so a documented
// command that stops working fails `make test`. The test is readme_test.go; sandbox.sh is the node.
package readme
