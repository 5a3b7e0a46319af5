package e2bserver

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/sandboxid"
)

// record is what the server knows of one sandbox beyond what the provider
// does: its owner, its TTL and its lifecycle policy. Records are persisted
// (without any API key: Owner is a digest) so a restarted server finds its
// sandboxes, paused ones included.
type record struct {
	ID         string `json:"id"`
	ProviderID string `json:"providerID"`
	// Owner is the hex SHA-256 of the API key that created the sandbox.
	Owner      string              `json:"owner"`
	TemplateID string              `json:"templateID"`
	Metadata   map[string]string   `json:"metadata,omitempty"`
	StartedAt  time.Time           `json:"startedAt"`
	EndAt      time.Time           `json:"endAt"`
	State      e2bapi.SandboxState `json:"state"`
	Timeout    time.Duration       `json:"timeout"`
	AutoPause  bool                `json:"autoPause"`
	AutoResume bool                `json:"autoResume"`
	Internet   bool                `json:"allowInternetAccess"`
	Secure     bool                `json:"secure"`
	Token      string              `json:"envdAccessToken,omitempty"`
	Envd       string              `json:"envdVersion"`
}

// sandbox is a record and the lock that serialises operations on it (one
// provider call at a time per sandbox). The record's fields are read and
// written under Server.mu; op is held across provider calls.
type sandbox struct {
	op  sync.Mutex
	rec record
	// killing is set while a kill runs: GET then answers 404, other
	// operations 409.
	killing bool
	// expiring is set while the reaper applies the timeout action.
	expiring bool
}

// idAlphabet is the alphabet of sandbox ids: lowercase letters and digits,
// what E2B's proxy accepts.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// idLength is the length of a sandbox id: 20 characters of 36, about 103
// bits from crypto/rand.
const idLength = 20

// newID returns an unguessable sandbox id (crypto/rand, rejection sampling
// so every character is uniform).
func newID() string {
	b := make([]byte, 0, idLength)
	var buf [32]byte
	for len(b) < idLength {
		_, _ = rand.Read(buf[:]) // never fails (Go 1.24 and later)
		for _, c := range buf {
			// 252 = 7*36: values from 252 up would bias the first letters.
			if c < 252 && len(b) < idLength {
				b = append(b, idAlphabet[int(c)%len(idAlphabet)])
			}
		}
	}
	return string(b)
}

// newToken returns an envd access token: 32 random bytes in hex.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// validID reports whether id is a sandbox id E2B's proxy would route:
// 1 to 64 lowercase letters and digits.
func validID(id string) bool { return sandboxid.Valid(id) }

// stateFileName is the records file under Config.StateDir.
const stateFileName = "e2bserver-sandboxes.json"

// loadRecords reads the records file; a missing file is no records.
func loadRecords(path string) ([]record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []record
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// saveRecords writes the records file atomically (a temporary file renamed
// into place), mode 0600: it holds access tokens.
func saveRecords(path string, recs []record) error {
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
