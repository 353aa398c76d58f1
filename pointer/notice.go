package pointer

import (
	"fmt"
	"path"
)

// NoticeName is the file a pointer layer holds in its target directory,
// beside .weightsnap/: what a container run without the weightsnap
// snapshotter (containerd's overlayfs unpacks the pointer layer as it is)
// finds there instead of the weights, saying what to run instead. A weight
// snapshot, where the weights are mounted, does not have it.
const NoticeName = "WEIGHTS_NOT_MOUNTED"

// MaxNoticeBytes bounds the notice file a reader accepts in a pointer layer.
const MaxNoticeBytes = 4096

// NoticePath is the path, inside the image, of the notice file of p: in
// its ViewDir.
func NoticePath(p Pointer) string {
	return path.Join(ViewDir(p), NoticeName)
}

// Notice is the content of p's notice file: plain text naming the artifact
// and the ways to get its weights mounted.
func Notice(p Pointer) []byte {
	what := p.Target + " should hold"
	host := fmt.Sprintf(`  weightsnap mount %s /srv/weights
  nerdctl run -v /srv/weights:%s:ro ...
`, p.Artifact, p.Target)
	if p.Layout == LayoutHF {
		what = fmt.Sprintf("%s should be the Hugging Face cache (HF_HUB_CACHE) folder of %s,\nholding", ViewDir(p), p.Repo)
		host = fmt.Sprintf(`  weightsnap mount --layout hf --repo %s %s /srv/hub
  nerdctl run -v /srv/hub:%s:ro -e HF_HUB_CACHE=%s -e HF_HUB_OFFLINE=1 ...
`, p.Repo, p.Artifact, p.Target, p.Target)
	}
	return fmt.Appendf(nil, `The weights are not mounted here.

%s the files of the weight artifact
  %s
  (identity %s),
but this container was started on a snapshotter other than weightsnap
(containerd's default, overlayfs), which unpacks only the pointer file in
.weightsnap/pointers/. Start it with the weightsnap snapshotter:

  nerdctl --snapshotter weightsnap run ...
  (Kubernetes: containerd's CRI with snapshotter = "weightsnap" for the
  runtime handler, or weightsnapd as the kubelet's image service)

or put the weights on the host and give the container that directory:

%s`, what, p.Artifact, p.ID, host)
}
