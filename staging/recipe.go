package staging

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
)

// Kinds of lanes.
const (
	KindHubMirror  = "hub-mirror"
	KindSparseRows = "sparse-rows"
)

// Verify is how a staged file is checked against its source.
type Verify string

// Verify modes.
const (
	// VerifyFull reads every byte: a hub blob is hashed against its own name
	// (sha256 or git blob sha1), other files and row ranges are compared
	// with the source by BLAKE3.
	VerifyFull Verify = "full"
	// VerifySample checks the size and sampled ranges (sampleHash).
	VerifySample Verify = "sample-hash"
	// VerifySize checks the size only (small files are still compared whole).
	VerifySize Verify = "size"
)

// Watermark is the most a destination filesystem may hold: a percentage of
// its size ("75%") or a byte count.
type Watermark struct {
	Percent float64 // 0 < Percent <= 100 when set
	Bytes   int64
}

// DefaultWatermark is max_used when a lane does not set it.
var DefaultWatermark = Watermark{Percent: 75}

// UnmarshalText implements encoding.TextUnmarshaler.
func (w *Watermark) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(f > 0 && f <= 100) {
			return fmt.Errorf("max_used %q: want a percentage in (0, 100] or a size", s)
		}
		*w = Watermark{Percent: f}
		return nil
	}
	n, err := bytefmt.Parse(s)
	if err != nil || n == 0 {
		return fmt.Errorf("max_used %q: want a percentage such as \"75%%\" or a size such as \"2TiB\"", s)
	}
	*w = Watermark{Bytes: n}
	return nil
}

// Limit is the watermark in bytes on a filesystem of total bytes.
func (w Watermark) Limit(total int64) int64 {
	if w.Bytes > 0 {
		return w.Bytes
	}
	return int64(float64(total) * w.Percent / 100)
}

func (w Watermark) String() string {
	if w.Bytes > 0 {
		return strconv.FormatInt(w.Bytes, 10)
	}
	return strconv.FormatFloat(w.Percent, 'f', -1, 64) + "%"
}

// Rows is a table's row selection: all rows ("auto", from the header) or
// the half-open range A:B.
type Rows struct {
	Auto       bool
	Start, End int64
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rows) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "auto" {
		*r = Rows{Auto: true}
		return nil
	}
	a, z, ok := strings.Cut(s, ":")
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(z, 10, 64)
	if !ok || err1 != nil || err2 != nil || start < 0 || end <= start {
		return fmt.Errorf("rows %q: want \"auto\" or \"A:B\" with 0 <= A < B", s)
	}
	*r = Rows{Start: start, End: end}
	return nil
}

func (r Rows) String() string {
	if r.Auto {
		return "auto"
	}
	return fmt.Sprintf("%d:%d", r.Start, r.End)
}

// Table names one safetensors tensor of a sparse-rows lane.
type Table struct {
	Name string `toml:"name" json:"name"`
	Rows Rows   `toml:"rows" json:"-"`
}

// Partitions of a sparse-rows lane's rows.
const (
	PartitionByRank = "by-rank" // rank r of ranks gets its contiguous share
	PartitionNone   = "none"    // the rows as given
)

// Block is one [[staging]] block: a lane.
type Block struct {
	ID           string       `toml:"id"`
	Kind         string       `toml:"kind"`
	Src          string       `toml:"src"`
	Dst          string       `toml:"dst"`
	Repos        []string     `toml:"repos"`
	Skip         []string     `toml:"skip"`
	Verify       Verify       `toml:"verify"`
	MinFree      bytefmt.Size `toml:"min_free"`
	MaxUsed      Watermark    `toml:"max_used"`
	KeepInMemory bytefmt.Size `toml:"keep_in_memory"`
	Tables       []Table      `toml:"tables"`
	Partition    string       `toml:"partition"`
	Rank         *int64       `toml:"rank"`
	Ranks        *int64       `toml:"ranks"`
	EmitEnv      string       `toml:"emit_env"`
	Mount        string       `toml:"mount"`
}

// Recipe is a parsed, validated recipe. Dst paths are expanded (~) for the
// user running it.
type Recipe struct {
	Blocks []Block `toml:"staging"`
}

// Block returns the lane with the given id.
func (r *Recipe) Block(id string) (*Block, bool) {
	for i := range r.Blocks {
		if r.Blocks[i].ID == id {
			return &r.Blocks[i], true
		}
	}
	return nil, false
}

// recipeErr is a recipe that cannot be used: the file, the line it is on
// (1-based; 0 when unknown) and the key (with its block index), classified
// errdefs.ErrInvalidArgument.
func recipeErr(file string, line int, key, msg string) error {
	var b strings.Builder
	b.WriteString("recipe ")
	b.WriteString(file)
	if line > 0 {
		fmt.Fprintf(&b, ":%d", line)
	}
	if key != "" {
		b.WriteString(": " + key)
	}
	return fmt.Errorf("%s: %s: %w", b.String(), msg, errdefs.ErrInvalidArgument)
}

// maxRecipeBytes bounds a recipe read; at most maxRecipeErrors unknown
// keys are reported.
const (
	maxRecipeBytes  = 4 << 20
	maxRecipeErrors = 20
)

// LoadRecipe reads and parses a recipe file.
func LoadRecipe(file string) (*Recipe, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("recipe: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxRecipeBytes+1)); err != nil {
		return nil, fmt.Errorf("recipe %s: %w", file, err)
	}
	if buf.Len() > maxRecipeBytes {
		return nil, recipeErr(file, 0, "", fmt.Sprintf("larger than %d bytes", maxRecipeBytes))
	}
	return ParseRecipe(file, buf.Bytes())
}

// ParseRecipe parses and validates a recipe; file only names it in errors.
// Unknown keys, values of the wrong type or out of range, and missing
// required keys are errdefs.ErrInvalidArgument naming the key and its line
// (several at once are joined).
func ParseRecipe(file string, data []byte) (*Recipe, error) {
	var r Recipe
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	pos := indexPositions(data)
	if err != nil {
		return nil, decodeErrors(file, pos, err)
	}
	v := validator{file: file, pos: pos}
	if len(r.Blocks) == 0 {
		v.add(0, "staging", "no [[staging]] blocks")
	}
	ids := map[string]int{}
	for i := range r.Blocks {
		v.block(i, &r.Blocks[i])
		if j, dup := ids[r.Blocks[i].ID]; dup && r.Blocks[i].ID != "" {
			v.add(i, "id", fmt.Sprintf("%q is also the id of block %d", r.Blocks[i].ID, j))
		}
		ids[r.Blocks[i].ID] = i
	}
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	return &r, nil
}

// decodeErrors turns go-toml's errors into recipe errors.
func decodeErrors(file string, pos *positions, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		errs := make([]error, 0, len(strict.Errors))
		for i := range min(len(strict.Errors), maxRecipeErrors) {
			line, col := strict.Errors[i].Position()
			errs = append(errs, recipeErr(file, line, pos.keyName(strict.Errors[i].Key(), line, col), "unknown key"))
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		return recipeErr(file, line, pos.keyName(de.Key(), line, col), msg)
	}
	return recipeErr(file, 0, "", err.Error())
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// repoRE is a hub repository: org/name, optionally prefixed by its type.
var repoRE = regexp.MustCompile(`^((models|datasets|spaces)/)?[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$`)

var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validator collects the semantic errors of a decoded recipe.
type validator struct {
	file string
	pos  *positions
	errs []error
}

func (v *validator) add(block int, key, msg string) {
	full := fmt.Sprintf("staging[%d].%s", block, key)
	line := v.pos.line(block, key)
	if key == "staging" {
		full, line = key, 0
	}
	v.errs = append(v.errs, recipeErr(v.file, line, full, msg))
}

func (v *validator) block(i int, b *Block) {
	req := func(key, val string) bool {
		if val == "" {
			v.add(i, key, "missing (required)")
			return false
		}
		return true
	}
	if req("id", b.ID) && !idRE.MatchString(b.ID) {
		v.add(i, "id", fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' (at most 128)", b.ID))
	}
	if req("src", b.Src) && !filepath.IsAbs(b.Src) {
		v.add(i, "src", fmt.Sprintf("%q is not an absolute path", b.Src))
	}
	if req("dst", b.Dst) {
		dst, err := expandHome(b.Dst)
		switch {
		case err != nil:
			v.add(i, "dst", err.Error())
		case !filepath.IsAbs(dst):
			v.add(i, "dst", fmt.Sprintf("%q is not an absolute path or ~/...", b.Dst))
		default:
			b.Dst = filepath.Clean(dst)
		}
	}
	switch b.Verify {
	case "":
		b.Verify = VerifyFull
	case VerifyFull, VerifySample, VerifySize:
	default:
		v.add(i, "verify", fmt.Sprintf("%q: want \"full\", \"sample-hash\" or \"size\"", b.Verify))
	}
	if b.MinFree < 0 {
		v.add(i, "min_free", "negative")
	}
	if b.KeepInMemory < 0 {
		v.add(i, "keep_in_memory", "negative")
	}
	if b.MaxUsed == (Watermark{}) {
		b.MaxUsed = DefaultWatermark
	}
	if b.EmitEnv != "" && !envRE.MatchString(b.EmitEnv) {
		v.add(i, "emit_env", fmt.Sprintf("%q is not an environment variable name", b.EmitEnv))
	}
	if b.Mount != "" && (!path.IsAbs(b.Mount) || strings.ContainsAny(b.Mount, ",:")) {
		v.add(i, "mount", fmt.Sprintf("%q: want an absolute container path without ',' or ':'", b.Mount))
	}
	switch b.Kind {
	case KindHubMirror:
		v.hubMirror(i, b)
	case KindSparseRows:
		v.sparseRows(i, b)
	case "":
		v.add(i, "kind", "missing (required): \"hub-mirror\" or \"sparse-rows\"")
	default:
		v.add(i, "kind", fmt.Sprintf("%q: want \"hub-mirror\" or \"sparse-rows\"", b.Kind))
	}
}

func (v *validator) hubMirror(i int, b *Block) {
	for _, key := range []struct {
		name string
		set  bool
	}{{"tables", b.Tables != nil}, {"partition", b.Partition != ""}, {"rank", b.Rank != nil}, {"ranks", b.Ranks != nil}} {
		if key.set {
			v.add(i, key.name, "only sparse-rows lanes take it")
		}
	}
	for _, r := range b.Repos {
		if !repoRE.MatchString(r) || strings.Contains(r, "--") || strings.Contains(r, "..") {
			v.add(i, "repos", fmt.Sprintf("%q is not a hub repository (org/name)", r))
		}
	}
	for _, s := range b.Skip {
		if _, err := path.Match(s, ""); err != nil || s == "" || path.IsAbs(s) {
			v.add(i, "skip", fmt.Sprintf("%q is not a relative path pattern", s))
		}
	}
}

func (v *validator) sparseRows(i int, b *Block) {
	if b.Repos != nil {
		v.add(i, "repos", "only hub-mirror lanes take it")
	}
	if b.Skip != nil {
		v.add(i, "skip", "only hub-mirror lanes take it")
	}
	if len(b.Tables) == 0 {
		v.add(i, "tables", "missing (required): at least one {name, rows}")
	}
	seen := map[string]bool{}
	for j, t := range b.Tables {
		key := fmt.Sprintf("tables[%d]", j)
		switch {
		case t.Name == "":
			v.add(i, key+".name", "missing (required)")
		case seen[t.Name]:
			v.add(i, key+".name", fmt.Sprintf("table %q named twice", t.Name))
		}
		seen[t.Name] = true
		if t.Rows == (Rows{}) {
			b.Tables[j].Rows = Rows{Auto: true}
		}
	}
	if b.Partition == "" {
		b.Partition = PartitionByRank
	}
	switch b.Partition {
	case PartitionByRank:
		switch {
		case b.Ranks == nil:
			v.add(i, "ranks", "missing (required by partition = \"by-rank\")")
		case *b.Ranks < 1 || *b.Ranks > 1<<20:
			v.add(i, "ranks", fmt.Sprintf("%d: want 1 to %d", *b.Ranks, 1<<20))
		case b.Rank == nil:
			v.add(i, "rank", "missing (required by partition = \"by-rank\")")
		case *b.Rank < 0 || *b.Rank >= *b.Ranks:
			v.add(i, "rank", fmt.Sprintf("%d: want 0 to ranks-1 (%d)", *b.Rank, *b.Ranks-1))
		}
	case PartitionNone:
		if b.Rank != nil || b.Ranks != nil {
			v.add(i, "partition", "\"none\" takes no rank or ranks")
		}
	default:
		v.add(i, "partition", fmt.Sprintf("%q: want \"by-rank\" or \"none\"", b.Partition))
	}
}

// expandHome expands a leading ~ (the running user's home) or ~user.
func expandHome(p string) (string, error) {
	if !strings.HasPrefix(p, "~") {
		return p, nil
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	var home string
	if name == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%q: no home directory: %v", p, err)
		}
		home = h
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return "", fmt.Errorf("%q: %v", p, err)
		}
		home = u.HomeDir
	}
	return filepath.Join(home, rest), nil
}
