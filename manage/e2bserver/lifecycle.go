package e2bserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var body e2bapi.Pause
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	b := s.held(w, r)
	if b == nil {
		return
	}
	defer b.op.Unlock()
	if s.stateOf(b) == e2bapi.StatePaused {
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %q is already paused", b.rec.ID))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
	defer cancel()
	if err := s.provider.Pause(ctx, b.rec.ProviderID); err != nil {
		s.writeProviderError(w, "pause sandbox", err)
		return
	}
	s.setState(b, e2bapi.StatePaused)
	w.WriteHeader(http.StatusNoContent)
}

// resumeBody is ResumedSandbox: timeout (default 15 s) and the deprecated
// autoPause.
type resumeBody struct {
	Timeout   *int64 `json:"timeout"`
	AutoPause *bool  `json:"autoPause"`
}

func (s *Server) resumeDeprecated(w http.ResponseWriter, r *http.Request) {
	var body resumeBody
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	b, ttl := s.heldFor(w, r, body.Timeout)
	if b == nil {
		return
	}
	defer b.op.Unlock()
	if s.stateOf(b) == e2bapi.StateRunning {
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %s is already running", b.rec.ID))
		return
	}
	if body.AutoPause != nil {
		s.mu.Lock()
		b.rec.AutoPause = *body.AutoPause
		s.mu.Unlock()
	}
	if !s.resumeOrWrite(w, r, b, ttl) {
		return
	}
	s.writeSandbox(w, http.StatusCreated, b)
}

// timeoutBody is ConnectSandbox and SetTimeout with presence kept.
type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// connect extends a running sandbox's end time (never shortening it; 200)
// or resumes a paused one (201). SDK 2.x omits timeout when the caller
// gave none; that means DefaultTimeout.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	b, ttl := s.heldFor(w, r, body.Timeout)
	if b == nil {
		return
	}
	defer b.op.Unlock()
	status := http.StatusOK
	if s.stateOf(b) == e2bapi.StateRunning {
		s.mu.Lock()
		if end := time.Now().Add(ttl).UTC(); end.After(b.rec.EndAt) {
			b.rec.EndAt = end
			s.saveLocked()
		}
		s.mu.Unlock()
		s.kickReaper()
	} else {
		if !s.resumeOrWrite(w, r, b, ttl) {
			return
		}
		status = http.StatusCreated
	}
	s.writeSandbox(w, status, b)
}

// heldFor checks an optional timeout (see ttlOrDefault), then finds and
// locks the sandbox (see held). It returns nil once it has written the
// error; else the caller unlocks b.op.
func (s *Server) heldFor(w http.ResponseWriter, r *http.Request, timeout *int64) (*sandbox, time.Duration) {
	ttl, ok := s.ttlOrDefault(w, timeout)
	if !ok {
		return nil, 0
	}
	return s.held(w, r), ttl
}

// resumeOrWrite resumes b's sandbox for ttl, bounded by providerTimeout; on
// failure it writes the provider's error and returns false.
func (s *Server) resumeOrWrite(w http.ResponseWriter, r *http.Request, b *sandbox, ttl time.Duration) bool {
	ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
	defer cancel()
	if err := s.resume(ctx, b, ttl); err != nil {
		s.writeProviderError(w, "resume sandbox", err)
		return false
	}
	return true
}

// writeSandbox writes b's record, read under s.mu, as a Sandbox body.
func (s *Server) writeSandbox(w http.ResponseWriter, status int, b *sandbox) {
	s.mu.Lock()
	rec := b.rec
	s.mu.Unlock()
	writeJSON(w, status, s.sandboxBody(rec))
}

// setTimeout sets the end time to now+timeout, shortening it if asked.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	if body.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	ttl, err := s.ttl(*body.Timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Max instance length exceeded: "+err.Error())
		return
	}
	s.extend(w, r, ttl, false)
}

// refresh extends the end time by duration (at least 15 s), never
// shortening it.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	var body e2bapi.Refresh
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	if body.Duration < 0 || body.Duration > 3600 {
		writeError(w, http.StatusBadRequest, "duration must be between 0 and 3600 seconds")
		return
	}
	s.extend(w, r, max(time.Duration(body.Duration)*time.Second, DefaultTimeout), true)
}

// extend sets a running sandbox's end time to now+ttl (onlyLater: unless
// that is earlier than the current one); 409 when it is not running.
func (s *Server) extend(w http.ResponseWriter, r *http.Request, ttl time.Duration, onlyLater bool) {
	b := s.held(w, r)
	if b == nil {
		return
	}
	defer b.op.Unlock()
	s.mu.Lock()
	if b.rec.State != e2bapi.StateRunning {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %q is not running", b.rec.ID))
		return
	}
	end := time.Now().Add(ttl).UTC()
	if !onlyLater || end.After(b.rec.EndAt) {
		b.rec.EndAt = end
		s.saveLocked()
	}
	s.mu.Unlock()
	s.kickReaper()
	w.WriteHeader(http.StatusNoContent)
}
