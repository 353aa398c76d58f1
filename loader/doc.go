// Package loader holds the contracts through which an engine gets its
// weights from the runtime and gives back what it made of them. Load and
// the restorers are not called in this module yet (they are the seed of the
// engine loaders, vLLM and SGLang, to come); post-load publication is:
// weightsnap publish --kind compile-cache and weightsnapd's POST
// /v1/publish publish an engine's compile cache through it, with the
// POST_LOAD_ONLY producer producers.CompileCache. Example runs them end to
// end.
//
// A load is three parts:
//
//   - Restore. A Restorer fills a model (an engine's weights in memory, on
//     a device, ...) from a leased artifact (Leased; a *store.Lease is
//     one). PlanRestore validates the lease against the model without
//     touching it; the plan's one Commit is the only mutation. A commit
//     that fails marks the model HydrationPartial, and such a model is
//     never used again. MapRestorer into a MapModel is the reference
//     implementation.
//
//   - Load. Load resolves a request through a resolve.Runtime (the store,
//     the remotes, a local build) and restores the result into a fresh
//     model, or loads the canonical source where the mode permits; one
//     report covers the resolution and the restore, and a commit that fails
//     falls back, in preferred mode, to the canonical source in another
//     fresh model. It is built on resolve.Runtime.StartLoad (resolve.Loading),
//     which a loader of another shape can use the same way.
//
//   - Publish after load. resolve.Runtime.PublishAfterLoad publishes, after
//     a load, an artifact a POST_LOAD_ONLY producer makes (gated by
//     allow_post_load_publish, with its own report; it never changes the
//     completed load). TensorMap is such a producer: it publishes tensors a
//     loaded model holds in memory; producers.CompileCache another: the
//     cache directory an engine wrote at its first start, under an identity
//     made from its keys (artifact.CompileCacheIdentity), so a later start
//     finds it before it has one.
package loader
