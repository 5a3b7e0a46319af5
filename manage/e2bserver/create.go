package e2bserver

import (
	"context"
	"net/http"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// newSandboxBody is NewSandbox with presence of the timeout kept.
type newSandboxBody struct {
	e2bapi.NewSandbox
	Timeout *int64 `json:"timeout"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body newSandboxBody
	if err := decodeBody(r, &body); err != nil {
		badBody(w, err)
		return
	}
	if body.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	if body.Timeout != nil && *body.Timeout <= 0 {
		writeError(w, http.StatusBadRequest, "timeout must be greater than 0")
		return
	}
	ttl, ok := s.ttlOrDefault(w, body.Timeout)
	if !ok {
		return
	}
	autoPause := body.AutoPause != nil && *body.AutoPause
	autoResume := body.AutoResume != nil && body.AutoResume.Enabled
	if body.AutoPauseMemory != nil && !*body.AutoPauseMemory {
		if !autoPause {
			writeError(w, http.StatusBadRequest, "autoPauseMemory requires autoPause")
			return
		}
		if autoResume {
			writeError(w, http.StatusBadRequest, "autoPauseMemory false cannot be combined with autoResume")
			return
		}
	}
	var internet manage.NetworkPolicy
	if body.AllowInternet == nil || *body.AllowInternet {
		internet = manage.NetworkPolicyOn()
	}
	template := body.TemplateID
	if template == "base" {
		template = "" // the provider's default
	}
	ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
	defer cancel()
	info, err := s.provider.Create(ctx, manage.SandboxConfig{
		Key:      "e2b:" + ownerOf(r)[:12],
		Env:      body.EnvVars,
		Network:  internet,
		Template: template,
		Lifetime: ttl,
	})
	if err != nil {
		s.writeProviderError(w, "create sandbox", err)
		return
	}
	now := time.Now().UTC()
	rec := record{
		ID:         newID(),
		ProviderID: info.ID,
		Owner:      ownerOf(r),
		TemplateID: body.TemplateID,
		Metadata:   body.Metadata,
		StartedAt:  now,
		EndAt:      now.Add(ttl),
		State:      e2bapi.StateRunning,
		Timeout:    ttl,
		AutoPause:  autoPause,
		AutoResume: autoResume,
		Internet:   internet.IsOn(),
		Secure:     body.Secure != nil && *body.Secure,
		Envd:       info.EnvdVersion,
	}
	if rec.Secure {
		rec.Token = newToken()
	}
	s.mu.Lock()
	s.boxes[rec.ID] = &sandbox{rec: rec}
	s.saveLocked()
	s.mu.Unlock()
	s.kickReaper()
	writeJSON(w, http.StatusCreated, s.sandboxBody(rec))
}
