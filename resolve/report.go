package resolve

import (
	"encoding/json"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"github.com/weightsnap/weightsnap/store"
)

// ReportSchema is the version of the report encoding.
const ReportSchema = 1

// Report kinds.
const (
	ReportResolve         = "resolve"
	ReportLoad            = "load"
	ReportPostLoadPublish = "post_load_publish"
)

// Outcome is how a call ended.
type Outcome string

// Outcomes.
const (
	// OutcomeHit is a validated local artifact.
	OutcomeHit Outcome = "hit"
	// OutcomeFetched is a remote artifact materialised locally.
	OutcomeFetched Outcome = "fetched"
	// OutcomeBuilt is an artifact a local producer made.
	OutcomeBuilt Outcome = "built"
	// OutcomeCanonical is the canonical source, without an artifact.
	OutcomeCanonical Outcome = "canonical"
	// OutcomeFailed is a failure, in Report.Failure.
	OutcomeFailed Outcome = "failed"
	// OutcomePublished is a post-load publication that built the artifact.
	OutcomePublished Outcome = "published"
	// OutcomePresent is a post-load publication of an artifact already there.
	OutcomePresent Outcome = "present"
	// OutcomeSkipped is a post-load publication the mode or policy did not allow.
	OutcomeSkipped Outcome = "skipped"
)

// Sources in reports.
const (
	SourceLocal     = "local"
	SourceCanonical = "canonical"
	// SourceProducerPrefix prefixes a local producer's name.
	SourceProducerPrefix = "producer:"
)

// Steps in reports.
const (
	StepDomain      = "domain"
	StepFingerprint = "fingerprint"
	StepIdentity    = "identity"
	StepLookup      = "lookup"
	StepRemote      = "remote"
	StepProduce     = "produce"
	StepCanonical   = "canonical"
	StepModel       = "model"
	StepPlan        = "restore_plan"
	StepCommit      = "restore_commit"
	StepPublish     = "publish"
)

// Step outcomes.
const (
	StepOK      = "ok"
	StepHit     = "hit"
	StepMiss    = "miss"
	StepFailed  = "failed"
	StepSkipped = "skipped"
)

// Step is one timed step of a call.
type Step struct {
	Name     string        `json:"name"`
	Source   string        `json:"source,omitempty"`
	Outcome  string        `json:"outcome"`
	Duration time.Duration `json:"-"` // "seconds", and "duration_ns" as the first schema gave it
	Bytes    int64         `json:"bytes,omitempty"`
	Detail   string        `json:"detail,omitempty"`
	// Transfer is how a remote provider moved the artifact, when it says.
	Transfer *store.Transfer `json:"transfer,omitempty"`
}

// MarshalJSON is the step's encoding: its fields, the duration in seconds
// and in nanoseconds ("duration_ns"), and a transfer's fetched bytes also
// under "bytes", its first name in this report.
func (s Step) MarshalJSON() ([]byte, error) {
	type fields Step
	type transfer struct {
		store.Transfer
		Bytes int64 `json:"bytes"`
	}
	var t *transfer
	if s.Transfer != nil {
		t = &transfer{*s.Transfer, s.Transfer.Fetched}
	}
	return json.Marshal(struct {
		fields
		Seconds    float64   `json:"seconds"`
		DurationNs int64     `json:"duration_ns"`
		Transfer   *transfer `json:"transfer,omitempty"`
	}{fields(s), s.Duration.Seconds(), s.Duration.Nanoseconds(), t})
}

// Counters is the work a call did.
type Counters struct {
	// ProducerRuns counts producers (local or remote) that ran.
	ProducerRuns int `json:"producer_runs"`
	// SourceBytesRead counts canonical source bytes read: by fingerprinting
	// and by producers.
	SourceBytesRead int64 `json:"source_bytes_read"`
	// Fingerprint cache: files fingerprinted and how.
	FingerprintFiles   int `json:"fingerprint_files"`
	FingerprintHits    int `json:"fingerprint_hits"`
	FingerprintMisses  int `json:"fingerprint_misses"`
	FingerprintRebuilt int `json:"fingerprint_rebuilt"`
	FingerprintErrors  int `json:"fingerprint_errors"`
	FingerprintNamed   int `json:"fingerprint_named"`
}

func (c *Counters) addFingerprint(s fingerprint.Stats) {
	c.FingerprintFiles += s.Files
	c.FingerprintHits += s.Hits
	c.FingerprintMisses += s.Misses
	c.FingerprintRebuilt += s.Rebuilt
	c.FingerprintErrors += s.Errors
	c.FingerprintNamed += s.Named
	c.SourceBytesRead += s.HashedBytes
}

// Report is the one terminal report of a call.
type Report struct {
	Schema  int         `json:"schema"`
	Kind    string      `json:"kind"`
	ID      artifact.ID `json:"identity,omitzero"` // sha256:<hex>
	Mode    Mode        `json:"mode"`
	Outcome Outcome     `json:"outcome"`
	// Source is where the result came from: local, a provider's name,
	// producer:<name>, or canonical.
	Source string `json:"source,omitempty"`
	// Path is the artifact directory, or the canonical source directory.
	Path string `json:"path,omitempty"`
	// BytesMoved is the payload bytes of the artifact this call published
	// (fetched or built); 0 on a hit or a fallback.
	BytesMoved int64         `json:"bytes_moved"`
	Duration   time.Duration `json:"-"` // "seconds", and "duration_ns" as the first schema gave it
	Steps      []Step        `json:"steps"`
	Counters   Counters      `json:"counters"`
	// Failure is the terminal failure, when Outcome is failed.
	Failure *Failure `json:"failure,omitempty"`
	// Recovered are the failures that moved resolution on to the next
	// source or to the canonical fallback, in order.
	Recovered []*Failure `json:"recovered,omitempty"`
}

func newReport(kind string, mode Mode) *Report {
	return &Report{Schema: ReportSchema, Kind: kind, Mode: mode, Steps: []Step{}}
}

// MarshalJSON is the report's encoding: its fields, and the call's
// duration in seconds and in nanoseconds ("duration_ns", as the first schema
// gave it).
func (r Report) MarshalJSON() ([]byte, error) {
	type fields Report
	return jsonobj.Concat(fields(r), struct {
		Seconds    float64 `json:"seconds"`
		DurationNs int64   `json:"duration_ns"`
	}{r.Duration.Seconds(), r.Duration.Nanoseconds()})
}

// JSON returns the report's encoding.
func (r *Report) JSON() ([]byte, error) { return json.Marshal(r) }

// step records a step that began at start.
func (r *Report) step(name, source, outcome string, start time.Time, detail string) *Step {
	r.Steps = append(r.Steps, Step{Name: name, Source: source, Outcome: outcome,
		Duration: time.Since(start), Detail: detail})
	return &r.Steps[len(r.Steps)-1]
}
