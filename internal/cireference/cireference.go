//go:build containers_image_openpgp

package cireference

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containers/image/v5/docker"
	"github.com/containers/image/v5/image"
	"github.com/containers/image/v5/types"
)

// System is a containers/image system context that reads cosign's
// signature attachments from a plain-HTTP test registry and nothing of
// this host's configuration.
func System(t testing.TB) *types.SystemContext {
	t.Helper()
	dir := t.TempDir()
	regd := filepath.Join(dir, "registries.d")
	conf := filepath.Join(dir, "registries.conf")
	auth := filepath.Join(dir, "auth.json")
	if err := os.MkdirAll(regd, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string]string{
		filepath.Join(regd, "default.yaml"): "default-docker:\n  use-sigstore-attachments: true\n",
		conf:                                "",
		auth:                                "{}",
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &types.SystemContext{
		RegistriesDirPath:           regd,
		SystemRegistriesConfPath:    conf,
		AuthFilePath:                auth,
		DockerInsecureSkipTLSVerify: types.OptionalBoolTrue,
	}
}

// Open opens ref with containers/image's docker transport: an image whose
// manifest and signatures are read once.
func Open(t testing.TB, sys *types.SystemContext, ref string) types.UnparsedImage {
	t.Helper()
	r, err := docker.ParseReference("//" + ref)
	if err != nil {
		t.Fatal(err)
	}
	src, err := r.NewImageSource(context.Background(), sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return image.UnparsedInstance(src, nil)
}
