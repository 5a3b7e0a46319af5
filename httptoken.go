package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
)

// httpTokenFile is the file in the state directory that holds the token a
// loopback `serve --http` without --auth-tokens-file generates at start.
//
// Why a token on loopback: a loopback address is reachable by every user
// of the machine, not only by the one who started the server, and without a
// token each of them would be principal "local" (the operator's sandboxes,
// workspaces and files). As Jupyter does, the server makes a fresh random
// token each time it starts, prints it once to stderr with the URL, writes
// it to this file (mode 0600, so only the operator's user reads it) and
// requires it as a bearer token; the principal stays "local". The file is
// removed when the server stops, unless another server replaced it.
const httpTokenFile = "http-token"

// newHTTPToken returns a fresh token: 32 random bytes, hex.
func newHTTPToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (Go 1.24 and later)
	return hex.EncodeToString(b)
}

// writeHTTPToken writes token (and a newline) to dir's http-token, mode
// 0600, replacing the file atomically (a symlink there is replaced, never
// followed). It returns the file's path.
func writeHTTPToken(dir, token string) (string, error) {
	path := filepath.Join(dir, httpTokenFile)
	if err := atomicfile.Write(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the HTTP token to %s: %w", path, err)
	}
	return path, nil
}

// removeHTTPToken removes the token file at path if it still holds token.
func removeHTTPToken(path, token string) {
	if data, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(data), []byte(token)) {
		_ = os.Remove(path)
	}
}
