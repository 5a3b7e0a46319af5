package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// maxBodyBytes bounds a management API request body.
const maxBodyBytes = 1 << 20

// routes is the management API: E2B's paths (and the /v2 spellings of
// create and connect that SDK 2.x uses).
func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("POST /sandboxes", s.create)
	m.HandleFunc("POST /v2/sandboxes", s.create)
	m.HandleFunc("GET /sandboxes", s.listRunning)
	m.HandleFunc("GET /v2/sandboxes", s.list)
	m.HandleFunc("GET /sandboxes/{id}", s.get)
	m.HandleFunc("DELETE /sandboxes/{id}", s.delete)
	m.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	m.HandleFunc("POST /sandboxes/{id}/resume", s.resumeDeprecated)
	m.HandleFunc("POST /sandboxes/{id}/connect", s.connect)
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", s.connect)
	m.HandleFunc("POST /sandboxes/{id}/timeout", s.setTimeout)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", s.refresh)
	return m
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes E2B's error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, e2bapi.Error{Code: int32(status), Message: msg})
}

// writeProviderError answers a failed provider call: invalid arguments
// are the client's (400), anything else the server's (500, logged).
func (s *Server) writeProviderError(w http.ResponseWriter, what string, err error) {
	if connect.CodeOf(err) == connect.CodeInvalidArgument {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.log.Error(what+" failed", "err", err)
	writeError(w, http.StatusInternalServerError, what+" failed: "+err.Error())
}

// decodeBody reads an optional JSON body into v: an empty body leaves v
// as it is.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxBodyBytes {
		return errors.New("request body too large")
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// badBody answers a body that is not valid JSON for the endpoint.
func badBody(w http.ResponseWriter, err error) {
	writeError(w, http.StatusBadRequest, "Error when parsing request: "+err.Error())
}

// ttl checks a timeout in seconds against the ceiling.
func (s *Server) ttl(seconds int64) (time.Duration, error) {
	if seconds < 0 {
		return 0, errors.New("timeout must not be negative")
	}
	d := time.Duration(seconds) * time.Second
	if d > s.maxTimeout {
		return 0, ttlError{hours: int(s.maxTimeout / time.Hour)}
	}
	return d, nil
}

// ttlOrDefault is the lifetime an optional timeout in seconds asks for:
// DefaultTimeout when it is absent, else the checked timeout. When the
// timeout is refused it writes a 400 with the reason and returns false.
func (s *Server) ttlOrDefault(w http.ResponseWriter, timeout *int64) (time.Duration, bool) {
	if timeout == nil {
		return DefaultTimeout, true
	}
	ttl, err := s.ttl(*timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return 0, false
	}
	return ttl, true
}

// ttlError is E2B's message for a timeout beyond the ceiling.
type ttlError struct{ hours int }

func (e ttlError) Error() string {
	return fmt.Sprintf("Timeout cannot be greater than %d hours", e.hours)
}

// sandboxBody is the Sandbox body of create, resume and connect.
func (s *Server) sandboxBody(rec record) e2bapi.Sandbox {
	out := e2bapi.Sandbox{
		TemplateID:      rec.TemplateID,
		SandboxID:       rec.ID,
		ClientID:        clientID,
		EnvdVersion:     rec.Envd,
		EnvdAccessToken: rec.Token,
	}
	if s.domain != "" {
		d := s.domain
		out.Domain = &d
	}
	return out
}

// lost reports whether the provider says b is gone (removed behind the
// server's back, or its provider lost it); the record is then forgotten,
// as E2B forgets a sandbox that died. An inconclusive answer is not a
// loss.
func (s *Server) lost(ctx context.Context, b *sandbox) bool {
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	info, err := s.provider.Info(ctx, b.rec.ProviderID)
	if err != nil || !info.State.Terminal() {
		return false
	}
	s.log.Warn("sandbox is gone from the provider; forgetting it", "sandbox", b.rec.ID, "detail", info.Detail)
	s.forget(b)
	return true
}

// forget drops b's record and proxy connections.
func (s *Server) forget(b *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[b.rec.ID] != b {
		return
	}
	delete(s.boxes, b.rec.ID)
	if t := s.targets[b.rec.ID]; t != nil {
		t.client.Close()
		delete(s.targets, b.rec.ID)
	}
	s.saveLocked()
}

// present reports whether b is still a sandbox of the server (not killed
// by a concurrent call). The caller holds b.op.
func (s *Server) present(b *sandbox) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[b.rec.ID] == b
}

// held looks up owner's sandbox id and takes its op lock; nil (with the
// 404 written) when there is none. The caller unlocks b.op.
func (s *Server) held(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	b := s.lookup(ownerOf(r), id)
	if b == nil {
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return nil
	}
	b.op.Lock()
	if !s.present(b) {
		b.op.Unlock()
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return nil
	}
	return b
}

// stateOf reads b's state.
func (s *Server) stateOf(b *sandbox) e2bapi.SandboxState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.rec.State
}
