package e2bserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
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

// ttlError is E2B's message for a timeout beyond the ceiling.
type ttlError struct{ hours int }

func (e ttlError) Error() string {
	return fmt.Sprintf("Timeout cannot be greater than %d hours", e.hours)
}

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
	ttl := DefaultTimeout
	if body.Timeout != nil {
		if *body.Timeout <= 0 {
			writeError(w, http.StatusBadRequest, "timeout must be greater than 0")
			return
		}
		var err error
		if ttl, err = s.ttl(*body.Timeout); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
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

// listed is rec as a list entry.
func listed(rec record) e2bapi.ListedSandbox {
	return e2bapi.ListedSandbox{
		TemplateID:  rec.TemplateID,
		SandboxID:   rec.ID,
		ClientID:    clientID,
		StartedAt:   rec.StartedAt,
		EndAt:       rec.EndAt,
		CPUCount:    1,
		MemoryMB:    512,
		DiskSizeMB:  1024,
		State:       rec.State,
		EnvdVersion: rec.Envd,
		Metadata:    rec.Metadata,
	}
}

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
	ttl := DefaultTimeout
	if body.Timeout != nil {
		var err error
		if ttl, err = s.ttl(*body.Timeout); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	b := s.held(w, r)
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
	ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
	defer cancel()
	if err := s.resume(ctx, b, ttl); err != nil {
		s.writeProviderError(w, "resume sandbox", err)
		return
	}
	s.mu.Lock()
	rec := b.rec
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.sandboxBody(rec))
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
	ttl := DefaultTimeout
	if body.Timeout != nil {
		var err error
		if ttl, err = s.ttl(*body.Timeout); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	b := s.held(w, r)
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
		ctx, cancel := context.WithTimeout(r.Context(), providerTimeout)
		defer cancel()
		if err := s.resume(ctx, b, ttl); err != nil {
			s.writeProviderError(w, "resume sandbox", err)
			return
		}
		status = http.StatusCreated
	}
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

// listQuery is a parsed list request.
type listQuery struct {
	states   []e2bapi.SandboxState
	metadata map[string]string
	desc     bool
	limit    int
	after    string // the paging token's position: startedAt nanos and id
}

// parseMetadataFilter parses the metadata query parameter: URL-encoded
// k=v pairs, whose keys and values SDKs encode once more.
func parseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata %q is not URL-encoded key=value pairs", raw)
	}
	out := map[string]string{}
	for k, vs := range vals {
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		v := vs[len(vs)-1]
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out[k] = v
	}
	return out, nil
}

func (s *Server) parseList(q url.Values) (listQuery, error) {
	lq := listQuery{desc: true, limit: 100}
	if st := q.Get("state"); st != "" {
		for _, v := range strings.Split(st, ",") {
			switch e2bapi.SandboxState(strings.TrimSpace(v)) {
			case e2bapi.StateRunning:
				lq.states = append(lq.states, e2bapi.StateRunning)
			case e2bapi.StatePaused:
				lq.states = append(lq.states, e2bapi.StatePaused)
			default:
				return lq, fmt.Errorf("state %q: want running or paused", v)
			}
		}
	}
	var err error
	if lq.metadata, err = parseMetadataFilter(q.Get("metadata")); err != nil {
		return lq, err
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.desc = false
	default:
		return lq, fmt.Errorf("order %q: want asc or desc", q.Get("order"))
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return lq, fmt.Errorf("limit %q: want 1 to 100", l)
		}
		lq.limit = n
	}
	if t := q.Get("nextToken"); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		if err != nil || !strings.Contains(string(b), ".") {
			return lq, errors.New("nextToken is not valid")
		}
		lq.after = string(b)
	}
	return lq, nil
}

// position is a record's place in the list order, and its paging token.
func position(rec record) string {
	return fmt.Sprintf("%020d.%s", rec.StartedAt.UnixNano(), rec.ID)
}

// matching returns owner's records that pass q's filters, in q's order.
func (s *Server) matching(owner string, q listQuery) []record {
	s.mu.Lock()
	var recs []record
	for _, b := range s.boxes {
		rec := b.rec
		if rec.Owner != owner || b.killing {
			continue
		}
		if len(q.states) > 0 && !slices.Contains(q.states, rec.State) {
			continue
		}
		ok := true
		for k, v := range q.metadata {
			if got, has := rec.Metadata[k]; !has || got != v {
				ok = false
				break
			}
		}
		if ok {
			recs = append(recs, rec)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(recs, func(a, b record) int {
		c := strings.Compare(position(a), position(b))
		if q.desc {
			return -c
		}
		return c
	})
	return recs
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseList(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	recs := s.matching(ownerOf(r), q)
	running := 0
	for _, rec := range recs {
		if rec.State == e2bapi.StateRunning {
			running++
		}
	}
	if q.after != "" {
		i := 0
		for i < len(recs) {
			c := strings.Compare(position(recs[i]), q.after)
			if (q.desc && c < 0) || (!q.desc && c > 0) {
				break
			}
			i++
		}
		recs = recs[i:]
	}
	if len(recs) > q.limit {
		recs = recs[:q.limit]
		w.Header().Set(e2bapi.HeaderNextToken, base64.RawURLEncoding.EncodeToString([]byte(position(recs[len(recs)-1]))))
	}
	w.Header().Set(e2bapi.HeaderTotalRunning, strconv.Itoa(running))
	out := make([]e2bapi.ListedSandbox, 0, len(recs))
	for _, rec := range recs {
		out = append(out, listed(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

// listRunning is the deprecated GET /sandboxes: running sandboxes only.
func (s *Server) listRunning(w http.ResponseWriter, r *http.Request) {
	md, err := parseMetadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	recs := s.matching(ownerOf(r), listQuery{states: []e2bapi.SandboxState{e2bapi.StateRunning}, metadata: md, desc: true})
	out := make([]e2bapi.ListedSandbox, 0, len(recs))
	for _, rec := range recs {
		out = append(out, listed(rec))
	}
	writeJSON(w, http.StatusOK, out)
}
