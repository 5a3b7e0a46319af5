package e2bserver

import (
	"context"
	"net/http"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b := s.lookup(ownerOf(r), id)
	s.mu.Lock()
	if b == nil || b.killing {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return
	}
	rec := b.rec
	s.mu.Unlock()
	if s.lost(r.Context(), b) {
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return
	}
	onTimeout := "kill"
	if rec.AutoPause {
		onTimeout = "pause"
	}
	internet := rec.Internet
	detail := e2bapi.SandboxDetail{
		ListedSandbox:       listed(rec),
		EnvdAccessToken:     rec.Token,
		AllowInternetAccess: &internet,
		Lifecycle:           &e2bapi.Lifecycle{AutoResume: rec.AutoResume, OnTimeout: onTimeout},
	}
	if s.domain != "" {
		d := s.domain
		detail.Domain = &d
	}
	writeJSON(w, http.StatusOK, detail)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b := s.lookup(ownerOf(r), id)
	if b == nil {
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return
	}
	b.op.Lock()
	defer b.op.Unlock()
	if !s.present(b) {
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
	defer cancel()
	if err := s.kill(ctx, b); err != nil {
		s.writeProviderError(w, "kill sandbox", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
