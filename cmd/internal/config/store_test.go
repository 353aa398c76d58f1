package config

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

// TestStoreSizes: [store] sizes take the units flags take, or bytes; a bad
// size is invalid input naming its line.
func TestStoreSizes(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bytefmt.Size // -1: refused
	}{
		{`"300MiB"`, 300 << 20}, {`"1.5GiB"`, 3 << 29}, {`"2GB"`, 2e9}, {`314572800`, 300 << 20}, {`"4096"`, 4096}, {`0`, 0},
		{`"lots"`, -1}, {`"-1MiB"`, -1}, {`-5`, -1},
	} {
		file := "root = \"/r\"\n[store]\nmax_store_bytes = " + tc.value + "\n"
		cfg, err := Parse("config.toml", []byte(file))
		if tc.want < 0 {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "line 3") && !strings.Contains(err.Error(), "[store]") {
				t.Errorf("%s: %v, want invalid input naming line 3 or [store]", tc.value, err)
			}
			continue
		}
		if err != nil || cfg.Store.MaxStoreBytes != tc.want || !reflect.DeepEqual(cfg.StoreKeys, []string{"max_store_bytes"}) {
			t.Errorf("%s: %d %v %v, want %d", tc.value, cfg.Store.MaxStoreBytes, cfg.StoreKeys, err, tc.want)
		}
	}
}

// TestStoreKeys: the keys the file sets, in the order of the policy's
// fields; none for a file without [store].
func TestStoreKeys(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"", nil},
		{"[resolve]\nmode = \"required\"\n", nil},
		{"[store]\nlow_watermark_percent = 50\nmin_free_bytes = \"1GiB\"\nvalidation = \"full_checksum\"\n", []string{"validation", "min_free_bytes", "low_watermark_percent"}},
		{"store = { eviction = \"off\" }\n", []string{"eviction"}},
	} {
		cfg, err := Parse("config.toml", []byte(tc.file))
		if err != nil || !reflect.DeepEqual(cfg.StoreKeys, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.file, cfg.StoreKeys, err, tc.want)
		}
	}
}

// TestApplyStore: opening a store applies the file's [store]: the keys it
// sets are recorded and logged one line per field, the others keep the
// store's values; a policy that would not hold is refused, naming the
// field, and the store keeps its own.
func TestApplyStore(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	created := store.DefaultPolicy()
	created.MaxArtifactBytes, created.MaxStoreBytes = 100<<20, 512<<20
	if _, err := store.Open(ctx, root, &created); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		want       func(*store.Policy)
		logs       []string // field=… old=… new=…
		refused    string
	}{
		{name: "no [store]", want: func(*store.Policy) {}},
		{name: "limits and watermarks", file: "[store]\nmax_store_bytes = \"1GiB\"\nhigh_watermark_percent = 60\nlow_watermark_percent = 40\n",
			want: func(p *store.Policy) { p.MaxStoreBytes, p.HighWatermarkPercent, p.LowWatermarkPercent = 1<<30, 60, 40 },
			logs: []string{`field=max_store_bytes new="1.0 GiB" old="512.0 MiB"`, `field=high_watermark_percent new=60 old=85`, `field=low_watermark_percent new=40 old=75`}},
		{name: "the same again", file: "[store]\nmax_store_bytes = 1073741824\n", want: func(p *store.Policy) { p.MaxStoreBytes, p.HighWatermarkPercent, p.LowWatermarkPercent = 1<<30, 60, 40 }},
		{name: "low above the store's high", file: "[store]\nlow_watermark_percent = 70\n", refused: "low_watermark_percent 70 is above high_watermark_percent 60"},
		{name: "no limit on an artifact beside the store's", file: "[store]\nmax_artifact_bytes = 0\neviction = \"off\"\n",
			want: func(p *store.Policy) {
				p.MaxArtifactBytes, p.MaxStoreBytes, p.HighWatermarkPercent, p.LowWatermarkPercent, p.Eviction = 0, 1<<30, 60, 40, "off"
			},
			logs: []string{`field=max_artifact_bytes new="0 B" old="100.0 MiB"`, `field=eviction new=off old=lru`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := store.ReadPolicy(root)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse("config.toml", []byte("root = \""+root+"\"\n"+tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			logger := logrus.New()
			logger.SetOutput(&logs)
			logger.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
			d, err := store.Open(ctx, root, &cfg.Store)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.ApplyStore(log.WithLogger(ctx, logrus.NewEntry(logger)), d)
			got, rerr := store.ReadPolicy(root)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.refused != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.refused) || got != before {
					t.Fatalf("ApplyStore = %v, recorded %+v; want a refusal naming %q and %+v kept", err, got, tc.refused, before)
				}
				return
			}
			want := created
			tc.want(&want)
			if err != nil || got != want || d.Policy() != want {
				t.Fatalf("ApplyStore = %v, recorded %+v, domain %+v; want %+v", err, got, d.Policy(), want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(tc.logs) == 0 && logs.Len() > 0 || len(tc.logs) > 0 && len(lines) != len(tc.logs) {
				t.Fatalf("logged:\n%s\nwant %d lines", logs.String(), len(tc.logs))
			}
			for i, l := range tc.logs {
				if !strings.Contains(lines[i], l) {
					t.Errorf("log line %d %q lacks %q", i, lines[i], l)
				}
			}
		})
	}
}

// TestLoadRoot: $WEIGHTSNAP_ROOT beats the file's root, which beats the
// default.
func TestLoadRoot(t *testing.T) {
	dir := t.TempDir()
	withRoot, without := filepath.Join(dir, "with-root.toml"), filepath.Join(dir, "without.toml")
	if err := os.WriteFile(withRoot, []byte("root = \"/from/file\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(without, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, env, want string
	}{
		{withRoot, "", "/from/file"},
		{withRoot, "/from/env", "/from/env"},
		{without, "/from/env", "/from/env"},
		{without, "", DefaultRoot()},
		{"", "/from/env", "/from/env"},
	} {
		t.Setenv(EnvRoot, tc.env)
		cfg, err := Load(tc.file)
		if err != nil || cfg.Root != tc.want {
			t.Errorf("file %q, $%s=%q: root %q, %v; want %q", tc.file, EnvRoot, tc.env, cfg.Root, err, tc.want)
		}
	}
}
