//go:build !powercut

package store

// testFilesystem admits nothing beyond supportedFS: only test binaries
// built with the "powercut" tag admit the power-cut test filesystem.
func testFilesystem(string, int64) (string, bool) { return "", false }
