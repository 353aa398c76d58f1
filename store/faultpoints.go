package store

// FaultPoints names the steps at which the crash harness kills or pauses a process.
// They are steps of publication, deny, quarantine, move, removal, eviction, cleanup and gc.
// The points act only in binaries built with the "faults" build tag.
// In every other build faultPoint is an empty function.
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
	"remove.after-rename",
	"remove.after-sync",
	"remove.mid-delete",
	"cleanup.before-remove",
	"cleanup.after-tombstone",
	"gc.after-temps",
	"gc.after-clear",
	"gc.after-quarantine",
	"lookup.validated",
	"evict.locked",
	"evict.after-rename",
	"evict.after-sync",
	"evict.before-delete",
	"evict.after-delete",
}
