package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// The outcomes of a tool call, as counted in sandbox_mcp_tool_calls_total.
const (
	outcomeOK            = "ok"
	outcomeToolError     = "tool_error"     // a result with isError
	outcomeProtocolError = "protocol_error" // a JSON-RPC error (unknown tool, …)
)

// unknownTool labels calls of tools that do not exist, so clients cannot
// grow the label set.
const unknownTool = "unknown"

// durationBuckets are the upper bounds (seconds) of the call-duration
// histogram: from a fast file read to a long command.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// metrics collects the counters /metrics exposes. It is safe for concurrent
// use.
type metrics struct {
	tools map[string]bool

	// starts maps a call's request (the pointer mcp-go passes to every hook
	// of one call) to when it started.
	starts sync.Map

	mu        sync.Mutex
	calls     map[[2]string]int64 // {tool, outcome}
	durations map[string]*histogram
	requests  map[[2]string]int64 // {path, status code}

	// budget is the server's request memory budget, shown as a gauge; nil
	// shows none.
	budget        *memoryBudget
	memoryRefusal int64 // requests the budget refused with 503
}

type histogram struct {
	counts []int64 // per bucket (not cumulative); the last is +Inf
	sum    float64
	count  int64
}

func newMetrics(tools map[string]bool) *metrics {
	return &metrics{
		tools:     tools,
		calls:     map[[2]string]int64{},
		durations: map[string]*histogram{},
		requests:  map[[2]string]int64{},
	}
}

func (m *metrics) toolLabel(name string) string {
	if m.tools[name] {
		return name
	}
	return unknownTool
}

func (m *metrics) beforeCall(_ context.Context, _ any, req *mcp.CallToolRequest) {
	m.starts.Store(req, time.Now())
}

func (m *metrics) afterCall(_ context.Context, _ any, req *mcp.CallToolRequest, result any) {
	outcome := outcomeOK
	if res, ok := result.(*mcp.CallToolResult); ok && res != nil && res.IsError {
		outcome = outcomeToolError
	}
	m.finish(req, outcome)
}

func (m *metrics) onError(_ context.Context, _ any, method mcp.MCPMethod, message any, _ error) {
	if method != mcp.MethodToolsCall {
		return
	}
	req, ok := message.(*mcp.CallToolRequest)
	if !ok {
		return
	}
	m.finish(req, outcomeProtocolError)
}

func (m *metrics) finish(req *mcp.CallToolRequest, outcome string) {
	tool := m.toolLabel(req.Params.Name)
	var elapsed float64
	started, ok := m.starts.LoadAndDelete(req)
	if ok {
		elapsed = time.Since(started.(time.Time)).Seconds()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[[2]string{tool, outcome}]++
	if !ok {
		return
	}
	h := m.durations[tool]
	if h == nil {
		h = &histogram{counts: make([]int64, len(durationBuckets)+1)}
		m.durations[tool] = h
	}
	i, _ := slices.BinarySearch(durationBuckets, elapsed)
	h.counts[i]++
	h.sum += elapsed
	h.count++
}

// request counts one HTTP request.
func (m *metrics) request(path string, code int) {
	switch path {
	case "/mcp", "/healthz", "/metrics":
	default:
		path = "other"
	}
	m.mu.Lock()
	m.requests[[2]string{path, strconv.Itoa(code)}]++
	m.mu.Unlock()
}

// memoryRefused counts one request refused by the memory budget with 503.
func (m *metrics) memoryRefused() {
	m.mu.Lock()
	m.memoryRefusal++
	m.mu.Unlock()
}

// write renders the Prometheus text exposition format (version 0.0.4).
func (m *metrics) write(w io.Writer, st manage.Stats, sessions int) error {
	bw := bufio.NewWriter(w)
	m.mu.Lock()
	calls := sortedPairs(m.calls)
	requests := sortedPairs(m.requests)
	tools := make([]string, 0, len(m.durations))
	for t := range m.durations {
		tools = append(tools, t)
	}
	slices.Sort(tools)
	refusals := m.memoryRefusal
	hists := make([]histogram, len(tools))
	for i, t := range tools {
		h := m.durations[t]
		hists[i] = histogram{counts: slices.Clone(h.counts), sum: h.sum, count: h.count}
	}
	m.mu.Unlock()

	header(bw, "sandbox_mcp_tool_calls_total", "counter", "Tool calls by tool and outcome (ok, tool_error: a result with isError, protocol_error: a JSON-RPC error).")
	for _, c := range calls {
		fmt.Fprintf(bw, "sandbox_mcp_tool_calls_total{tool=%s,outcome=%s} %d\n", quote(c.k[0]), quote(c.k[1]), c.v)
	}
	header(bw, "sandbox_mcp_tool_call_duration_seconds", "histogram", "Tool call duration by tool, from the request's arrival to its result.")
	for i, t := range tools {
		h := hists[i]
		var cum int64
		for b, le := range durationBuckets {
			cum += h.counts[b]
			fmt.Fprintf(bw, "sandbox_mcp_tool_call_duration_seconds_bucket{tool=%s,le=\"%s\"} %d\n", quote(t), strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		cum += h.counts[len(durationBuckets)]
		fmt.Fprintf(bw, "sandbox_mcp_tool_call_duration_seconds_bucket{tool=%s,le=\"+Inf\"} %d\n", quote(t), cum)
		fmt.Fprintf(bw, "sandbox_mcp_tool_call_duration_seconds_sum{tool=%s} %s\n", quote(t), strconv.FormatFloat(h.sum, 'g', -1, 64))
		fmt.Fprintf(bw, "sandbox_mcp_tool_call_duration_seconds_count{tool=%s} %d\n", quote(t), h.count)
	}
	header(bw, "sandbox_mcp_sandboxes", "gauge", "Workspaces with a sandbox, by the sandbox's state.")
	for _, state := range []manage.State{manage.StateRunning, manage.StatePaused, manage.StateStopped, manage.StateGone} {
		fmt.Fprintf(bw, "sandbox_mcp_sandboxes{state=%s} %d\n", quote(string(state)), st.Workspaces[state])
	}
	counters := []struct {
		name, help string
		v          int64
	}{
		{"sandbox_mcp_sandbox_creations_total", "Sandboxes created (first use, recreation, reset).", st.Creations},
		{"sandbox_mcp_sandbox_recreations_total", "Sandboxes replaced after a confirmed loss.", st.Recreations},
		{"sandbox_mcp_sandbox_pauses_total", "Sandboxes paused (idle or end of session).", st.Pauses},
		{"sandbox_mcp_sandbox_resumes_total", "Paused or stopped sandboxes resumed.", st.Resumes},
		{"sandbox_mcp_sandbox_reaped_total", "Sandboxes killed after staying paused longer than the TTL.", st.Reaped},
	}
	for _, c := range counters {
		header(bw, c.name, "counter", c.help)
		fmt.Fprintf(bw, "%s %d\n", c.name, c.v)
	}
	header(bw, "sandbox_mcp_http_sessions_active", "gauge", "MCP sessions (protocol revisions with sessions) currently open over HTTP.")
	fmt.Fprintf(bw, "sandbox_mcp_http_sessions_active %d\n", sessions)
	header(bw, "sandbox_mcp_http_requests_total", "counter", "HTTP requests by path and status code.")
	for _, r := range requests {
		fmt.Fprintf(bw, "sandbox_mcp_http_requests_total{path=%s,code=%s} %d\n", quote(r.k[0]), quote(r.k[1]), r.v)
	}
	if m.budget != nil {
		used, _ := m.budget.inUse()
		header(bw, "sandbox_mcp_request_memory_bytes", "gauge", "Request body bytes reserved in the memory budget (--max-request-memory) now.")
		fmt.Fprintf(bw, "sandbox_mcp_request_memory_bytes %d\n", used)
		header(bw, "sandbox_mcp_request_memory_refused_total", "counter", "Requests refused with 503 because the memory budget was in use.")
		fmt.Fprintf(bw, "sandbox_mcp_request_memory_refused_total %d\n", refusals)
	}
	return bw.Flush()
}

func header(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// labelEscaper escapes \, " and newline in a label value.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// quote renders a label value: quoted, with \, " and newline escaped.
func quote(v string) string {
	return `"` + labelEscaper.Replace(v) + `"`
}

type pair struct {
	k [2]string
	v int64
}

func sortedPairs(m map[[2]string]int64) []pair {
	out := make([]pair, 0, len(m))
	for k, v := range m {
		out = append(out, pair{k, v})
	}
	slices.SortFunc(out, func(a, b pair) int {
		if c := strings.Compare(a.k[0], b.k[0]); c != 0 {
			return c
		}
		return strings.Compare(a.k[1], b.k[1])
	})
	return out
}

// serveMetrics is the /metrics handler.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "use GET")
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := s.metrics.write(w, s.manager.Stats(), s.sessions.count()); err != nil {
		s.log.Debug("writing /metrics failed", "err", err)
	}
}
