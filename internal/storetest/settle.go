package storetest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
)

// Settle waits until every file below dir last changed more than the
// fingerprint cache's racy window ago, so a scan from now on records
// fingerprints it trusts at once (a record of a file changed within the
// window of its hash is not trusted). It reads the files' change times
// rather than sleeping a fixed time.
func Settle(tb testing.TB, dir string) {
	tb.Helper()
	var last int64
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Stat(p) // what a link leads to, as the cache keys it
		if os.IsNotExist(err) {
			return nil // a dangling link: nothing to fingerprint
		}
		if err != nil {
			return err
		}
		st, err := artifact.StampOf(fi)
		if err != nil {
			return err
		}
		last = max(last, st.MtimeNs, st.CtimeNs)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	// One millisecond past the window: the cache compares with the time its
	// hash starts, which comes after this returns.
	time.Sleep(time.Until(time.Unix(0, last).Add(fingerprint.RacyWindow + time.Millisecond)))
}
