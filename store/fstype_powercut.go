//go:build powercut

package store

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// powercutFSType is the mount type of test/powercut's FUSE filesystem.
const powercutFSType = "fuse.powercut"

// testFilesystem admits, in test binaries built with the "powercut" tag
// only, the power-cut test filesystem: a FUSE mount of type fuse.powercut
// (named in /proc/self/mountinfo), and no other FUSE filesystem.
func testFilesystem(dir string, magic int64) (string, bool) {
	if magic != unix.FUSE_SUPER_MAGIC {
		return "", false
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false
	}
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	best, bestType := "", ""
	for _, line := range strings.Split(string(raw), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(line)
		sep := strings.Index(line, " - ")
		if len(fields) < 5 || sep < 0 {
			continue
		}
		mnt := unescapeMountinfo(fields[4])
		after := strings.Fields(line[sep+3:])
		if len(after) == 0 || len(mnt) < len(best) || !within(dir, mnt) {
			continue
		}
		best, bestType = mnt, after[0]
	}
	return powercutFSType, bestType == powercutFSType
}

func within(dir, mnt string) bool {
	return dir == mnt || mnt == "/" || strings.HasPrefix(dir, mnt+"/")
}

// unescapeMountinfo decodes the octal escapes (\040 for a space) of a mountinfo path.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
