package artifact

import (
	"bytes"
	"testing"
)

// FuzzParseIdentity: an accepted identity is valid, and its canonical JSON
// parses back to the same digest.
func FuzzParseIdentity(f *testing.F) {
	f.Add([]byte(`{"schema":1,"model":{"revision":"0123456789abcdef0123456789abcdef01234567","source":[{"path":"a.safetensors","size":1,"sha256":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}]},"component":"all","representation":{"dtype":"source"},"layout":{"name":"source"},"producer":{"name":"p","version":"1","fingerprint":"f","manifest_schema":1,"restorer_schema":1}}`))
	f.Add([]byte(`{"schema":1,"model":{"revision":"0123456789abcdef0123456789abcdef01234567","source":[{"path":"a.safetensors","size":1,"sha256":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}]},"component":"compile-cache","representation":{"dtype":"source"},"layout":{"name":"compile-cache"},"cache":{"for":"sha256:` + string(bytes.Repeat([]byte("b"), 64)) + `","engine":"vllm","engine_version":"0.11.0","gpu_arch":"sm_90","tp_size":1,"pp_size":1,"keys":{"cuda":"12.8"}},"producer":{"name":"p","version":"1","fingerprint":"f","manifest_schema":1,"restorer_schema":1}}`))
	f.Add([]byte(`{"schema":1,"model":{"revision":"main"}}`))
	f.Add([]byte(`{"schema":1,"extra":true}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		id, err := ParseIdentity(doc)
		if err != nil {
			return
		}
		c, err := id.CanonicalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseIdentity(c)
		if err != nil {
			t.Fatalf("canonical JSON of an accepted identity is refused: %v", err)
		}
		d1, _ := id.ID()
		d2, _ := back.ID()
		if d1 != d2 {
			t.Fatal("digest changed through canonical JSON")
		}
	})
}
