// Package contentfile installs files named by their content, as both
// providers install the envd binary into their state directory: several
// servers may install the same file at once, and none ever sees a file half
// written.
package contentfile

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
)

// Write writes r into dir (mode 0755) as prefix followed by the first 16
// hex digits of its SHA-256, and returns that path. It writes a temporary
// file (.<prefix>*.tmp), syncs it and renames it into place once complete,
// so a concurrent Write of the same content replaces it with the same bytes.
func Write(dir, prefix string, r io.Reader) (string, error) {
	tmp, err := os.CreateTemp(dir, "."+prefix+"*.tmp")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	dst := filepath.Join(dir, prefix+hex.EncodeToString(h.Sum(nil))[:16])
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", err
	}
	return dst, nil
}
