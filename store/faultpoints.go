package store

// FaultPoints names every step of publication, deny, quarantine, move,
// eviction and cleanup at which the crash harness (test/crash) kills or pauses a process.
// The points act only in binaries built with the "faults" build tag; in
// every other build faultPoint is an empty function.
var FaultPoints = []string{
	"write.mid-payload",
	"write.after-close",
	"publish.before-seal",
	"publish.after-manifest",
	"publish.after-index",
	"publish.after-ready",
	"publish.before-rename",
	"publish.after-rename",
	"publish.mid-harden",
	"publish.after-harden",
	"publish.after-sync",
	"deny.before-marker",
	"deny.after-marker",
	"quarantine.after-mode",
	"quarantine.after-rename",
	"quarantine.after-sync",
	"quarantine.after-unmark",
	"remove.after-mode",
	"remove.after-rename",
	"remove.after-sync",
	"remove.mid-delete",
	"cleanup.before-remove",
	"lookup.validated",
	"evict.locked",
	"evict.after-mode",
	"evict.after-rename",
	"evict.after-sync",
	"evict.before-delete",
	"evict.after-delete",
}
