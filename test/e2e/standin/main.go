// Command standin is the stand-in inference engine of the compile-cache
// end-to-end test (test/e2e/compilecache_test.go). It finds its model by
// Hugging Face repo id in HF_HUB_CACHE (offline, as a server run with
// HF_HUB_OFFLINE=1 does), reads every safetensors file of the revision
// refs/main names, then "compiles": a deterministic CPU-bound computation
// keyed by the weights, written as kernel files under its cache directory,
// which takes measurable time the first time and none once the directory
// holds it. Every start appends a line to the cache's starts.log (an engine
// writes into its cache). It prints one JSON line when ready (cache "hit"
// or "compiled", seconds to ready) and, with -serve, stays up until it is
// signalled.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// kernels and rounds size the compile: kernels files, each the end of a
// chain of rounds sha256 blocks (about 2 s on one core in all).
const (
	kernels = 4
	rounds  = 4_500_000
)

type ready struct {
	Ready          bool    `json:"ready"`
	Cache          string  `json:"cache"` // "hit" or "compiled"
	Tensors        int     `json:"tensors"`
	ModelBytes     int64   `json:"model_bytes"`
	Seconds        float64 `json:"seconds"`
	CompileSeconds float64 `json:"compile_seconds"`
	Key            string  `json:"key"`
}

func main() {
	repo := flag.String("repo", "", "Hugging Face repo id ORG/NAME")
	cache := flag.String("cache", "", "the engine's cache directory")
	serve := flag.Bool("serve", false, "stay up once ready until SIGTERM")
	flag.Parse()
	r, err := start(*repo, *cache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
	if *serve {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	}
}

func start(repo, cache string) (*ready, error) {
	t0 := time.Now()
	if os.Getenv("HF_HUB_OFFLINE") != "1" {
		return nil, errors.New("HF_HUB_OFFLINE=1 is not set: this engine never downloads")
	}
	hub := os.Getenv("HF_HUB_CACHE")
	if hub == "" || repo == "" || cache == "" {
		return nil, errors.New("HF_HUB_CACHE, -repo and -cache are needed")
	}
	folder := filepath.Join(hub, "models--"+strings.ReplaceAll(repo, "/", "--"))
	rev, err := os.ReadFile(filepath.Join(folder, "refs", "main"))
	if err != nil {
		return nil, fmt.Errorf("repo %s is not in the hub cache: %w", repo, err)
	}
	r := &ready{Ready: true}
	weights := sha256.New()
	snap := filepath.Join(folder, "snapshots", strings.TrimSpace(string(rev)))
	files, err := filepath.Glob(filepath.Join(snap, "*.safetensors"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no safetensors in %s (%v)", snap, err)
	}
	sort.Strings(files)
	for _, p := range files {
		n, size, err := load(p, weights)
		if err != nil {
			return nil, err
		}
		r.Tensors += n
		r.ModelBytes += size
	}
	r.Key = hex.EncodeToString(weights.Sum(nil))[:16]
	dir := filepath.Join(cache, "standin", r.Key)
	t1 := time.Now()
	if hit(dir) {
		r.Cache = "hit"
	} else {
		if err := compile(dir, r.Key); err != nil {
			return nil, err
		}
		r.Cache = "compiled"
	}
	r.CompileSeconds = time.Since(t1).Seconds()
	f, err := os.OpenFile(filepath.Join(dir, "starts.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("the cache is not writable: %w", err)
	}
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), r.Cache)
	if err := f.Close(); err != nil {
		return nil, err
	}
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

// load reads a safetensors file whole, checks its header's tensors lie in
// it, and hashes it into h.
func load(p string, h interface{ Write([]byte) (int, error) }) (tensors int, size int64, err error) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, err
	}
	if len(raw) < 8 {
		return 0, 0, fmt.Errorf("%s: too short", p)
	}
	n := binary.LittleEndian.Uint64(raw[:8])
	if n > uint64(len(raw)-8) {
		return 0, 0, fmt.Errorf("%s: header of %d bytes past the end", p, n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", p, err)
	}
	data := int64(len(raw)) - 8 - int64(n)
	for name, v := range header {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &t); err != nil || t.Offsets[0] > t.Offsets[1] || t.Offsets[1] > data {
			return 0, 0, fmt.Errorf("%s: tensor %s out of the file (%v)", p, name, err)
		}
		tensors++
	}
	h.Write(raw)
	return tensors, int64(len(raw)), nil
}

// hit says whether dir holds every kernel with the sums its manifest lists.
func hit(dir string) bool {
	raw, err := os.ReadFile(filepath.Join(dir, "kernels.json"))
	if err != nil {
		return false
	}
	var sums map[string]string
	if json.Unmarshal(raw, &sums) != nil || len(sums) != kernels {
		return false
	}
	for name, want := range sums {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if sum := sha256.Sum256(b); err != nil || hex.EncodeToString(sum[:]) != want {
			return false
		}
	}
	return true
}

// compile writes the kernels and their manifest, last.
func compile(dir, key string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	sums := map[string]string{}
	for k := range kernels {
		block := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", key, k)))
		var out bytes.Buffer
		for i := range rounds {
			block = sha256.Sum256(block[:])
			if i%(rounds/64) == 0 {
				out.Write(block[:])
			}
		}
		name := fmt.Sprintf("kernel-%d.bin", k)
		if err := os.WriteFile(filepath.Join(dir, name), out.Bytes(), 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(out.Bytes())
		sums[name] = hex.EncodeToString(sum[:])
	}
	raw, _ := json.Marshal(sums)
	return os.WriteFile(filepath.Join(dir, "kernels.json"), raw, 0o644)
}
