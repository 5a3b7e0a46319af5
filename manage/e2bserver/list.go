package e2bserver

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

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
