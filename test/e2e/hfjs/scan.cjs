// scan.cjs CACHE_DIR: prints, as one JSON document, what the Hugging Face hub's JavaScript reader
// (@huggingface/hub's scanCacheDir) sees in a hub cache: each repo's id and type, its files count and
// size, and each revision's commit, refs, size and files (path in the snapshot, size), sorted; the
// warnings' messages. Paths on the host and times are left out, so two caches compare as the hub sees
// them. HFJS_MODULES is the node_modules directory test/e2e/deps installed.
const { createRequire } = require("node:module");
const path = require("node:path");

const hub = createRequire(path.join(process.env.HFJS_MODULES, "/"))("@huggingface/hub");

const byKey = (key) => (a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);

hub
	.scanCacheDir(process.argv[2])
	.then((info) => {
		const repos = info.repos
			.map((r) => ({
				id: r.id.name,
				type: r.id.type,
				filesCount: r.filesCount,
				size: r.size,
				revisions: r.revisions
					.map((v) => ({
						commit: v.commitOid,
						refs: [...v.refs].sort(),
						size: v.size,
						files: v.files
							.map((f) => ({ path: path.relative(v.path, f.path), size: f.blob.size, blob: path.basename(f.blob.path) }))
							.sort(byKey((f) => f.path)),
					}))
					.sort(byKey((v) => v.commit)),
			}))
			.sort(byKey((r) => r.type + "/" + r.id));
		process.stdout.write(JSON.stringify({ size: info.size, repos, warnings: info.warnings.map((w) => String(w.message)) }) + "\n");
	})
	.catch((err) => {
		process.stderr.write(`scanCacheDir: ${err.stack || err}\n`);
		process.exit(1);
	});
