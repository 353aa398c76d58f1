package artifact

import "testing"

func FuzzDecodeIndex(f *testing.F) {
	for _, s := range []string{
		`{"schema":1,"identity":"sha256:00","files":[{"path":"a.safetensors","size":24,"sha256":"","blake3":"","data_start":16,"header_blake3":"","tensors":[{"name":"t","dtype":"U8","shape":[8],"offset":16,"length":8,"blake3":""}]}]}`,
		`{"schema":1,"identity":"","files":[{"path":"../x","size":1,"sha256":"","blake3":""}]}`,
		`{"schema":1,"identity":"","files":[{"path":"b","size":1,"sha256":"","blake3":""},{"path":"a","size":1,"sha256":"","blake3":""}]}`,
		`{"schema":2}`, `{"schema":1,"extra":0}`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		x, err := DecodeIndex(doc)
		if err != nil {
			return
		}
		for i, file := range x.Files {
			if ValidateRelPath(file.Path) != nil || (i > 0 && x.Files[i-1].Path >= file.Path) {
				t.Fatalf("accepted file path %q", file.Path)
			}
			for _, tn := range file.Tensors {
				if tn.Offset < file.DataStart || tn.Length < 0 || tn.Offset+tn.Length > file.Size {
					t.Fatalf("accepted tensor %q outside its file", tn.Name)
				}
			}
		}
	})
}
