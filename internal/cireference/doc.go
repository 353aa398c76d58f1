// Package cireference is containers/image's trust decision for tests: a
// system context that reads cosign's signature attachments from a test
// registry, and an image opened through its docker transport. Its code
// builds only with the containers_image_openpgp tag, which spares
// containers/image its cgo GPG binding.
package cireference
