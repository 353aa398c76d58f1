package e2e

import (
	"strings"
	"testing"
)

// TestCRICredentialsEveryTime: through weightsnapd's
// CRI socket, after a pull with the right credentials of a weight image
// and of a ModelPack artifact (a weights-only image) of the secured
// registry, a pull of each with wrong credentials, with none, and after
// crictl rmi, each fails as the registry answers (unauthorized), though
// the store holds the artifact; the right credentials still pull. A public
// weight image (the open registry) whose pointer names the private
// artifact gets no weights without credentials (nor with credentials of
// its own registry, which are not the artifact's), before and after the
// store holds the artifact, and nothing of it reaches containerd. The
// password is in no file or log.
func TestCRICredentialsEveryTime(t *testing.T) {
	c := startCRINode(t)
	right, wrong := c.user+":"+c.pass, c.user+":wrong-"+c.pass[:2]
	img, id, _ := c.pushPrivateWeightImage(t, "every", "4MiB")
	pub := c.reg.Ref("apps/public-every:v1")
	c.wsAuth(t, t.TempDir(), "image", "build", "--plain-http", "--base", c.base, "--weights", c.sec.Ref("models/every:v1"), "--at", "/llama", "-t", pub)
	mp := c.sec.Ref("models/every-mp:v1")
	c.pushModelPack(t, "models/every-mp:v1", "raw")

	c.refused(t, "", pub)
	if c.stored(t, id) {
		t.Fatalf("a refused pull of %s stored its artifact %s", pub, id)
	}
	for _, ref := range []string{img, mp} {
		if out, err := c.pull(right, ref); err != nil {
			t.Fatalf("pull of %s with the right credentials: %v\n%s", ref, err, out)
		}
	}
	if !c.stored(t, id) {
		t.Fatalf("the store does not hold %s after the pull of %s", id, img)
	}
	c.refused(t, "", pub)
	c.refused(t, right, pub) // the open registry's credentials, not the artifact's registry's
	for _, ref := range []string{img, mp} {
		c.refused(t, wrong, ref)
		c.refused(t, "", ref)
		crictl(t, c.ctd, "--image-endpoint", "unix://"+c.ws.CRI, "rmi", ref)
		c.refused(t, "", ref)
		c.refused(t, wrong, ref)
		if out, err := c.pull(right, ref); err != nil {
			t.Fatalf("pull of %s with the right credentials after the refusals: %v\n%s", ref, err, out)
		}
	}
	if imgs := crictl(t, c.ctd, "images"); strings.Contains(imgs, "apps/public-every") {
		t.Fatalf("a refused pull of %s left an image:\n%s", pub, imgs)
	}
	c.noPassword(t)
}

// refused pulls ref through weightsnapd's CRI socket with creds
// (user:pass, "" for none) and fails unless the pull fails as the secured
// registry answers: naming it, unauthorized (weightsnapd's words and
// containerd's with credentials), or pull access denied (containerd's
// without).
func (c *criNode) refused(t *testing.T, creds, ref string) {
	t.Helper()
	args := []string{"--image-endpoint", "unix://" + c.ws.CRI, "pull"}
	if creds != "" {
		args = append(args, "--creds", creds)
	}
	out, err := c.ctd.Crictl(append(args, ref)...)
	if err == nil {
		t.Fatalf("a pull of %s with credentials %q succeeded, want the registry's refusal\n%s", ref, strings.Replace(creds, c.pass, "<password>", 1), out)
	}
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, c.sec.Host) || (!strings.Contains(msg, "unauthorized") && !strings.Contains(msg, "pull access denied")) {
		t.Fatalf("a pull of %s with credentials %q: %v, want %s's unauthorized", ref, strings.Replace(creds, c.pass, "<password>", 1), err, c.sec.Host)
	}
}
