package control

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/weightsnap/weightsnap/artifact"
)

// KindCompileCache is the one kind of PublishRequest: a directory an
// engine wrote at its first start, published as a compile-cache artifact.
const KindCompileCache = "compile-cache"

// PublishRequest asks for the post-load publication of what a started
// engine made. weightsnap publish makes the same request in its own
// process.
type PublishRequest struct {
	Kind string `json:"kind"` // KindCompileCache
	// Dir is the absolute directory the engine wrote; read by whoever
	// publishes (the daemon, through the control socket). Not needed for a
	// dry run.
	Dir string `json:"dir,omitempty"`
	// For is the weight artifact the cache was compiled for, in the store.
	For           artifact.ID       `json:"for"`
	Engine        string            `json:"engine"`
	EngineVersion string            `json:"engine_version"`
	GPUArch       string            `json:"gpu_arch"`
	TPSize        int               `json:"tp_size"`
	PPSize        int               `json:"pp_size"`
	Keys          map[string]string `json:"keys,omitempty"`
	// DryRun computes the identity, publishing nothing: the ID a later
	// start looks the cache up by.
	DryRun bool `json:"dry_run,omitempty"`
}

// PublishResult is a publication's answer: the identity the keys make
// and, unless it was a dry run, the post-load publication's report
// (resolve.Report's JSON).
type PublishResult struct {
	ID       artifact.ID       `json:"id"`
	Identity artifact.Identity `json:"identity"`
	// Present says whether the store holds it: for a dry run, already;
	// after a publication, now (published, or there before).
	Present bool            `json:"present"`
	Report  json.RawMessage `json:"report,omitempty"`
}

// Publish asks the daemon to publish (POST /v1/publish); a refusal or a
// failed publication is an error alone (the daemon logs its report).
func (c *Client) Publish(ctx context.Context, req PublishRequest) (*PublishResult, error) {
	var out PublishResult
	if err := c.call(ctx, http.MethodPost, "/v1/publish", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
