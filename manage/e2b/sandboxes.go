package e2b

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// seconds is d in whole seconds for the API, rounded up, at least 1.
func seconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	if s > 1<<31-1 {
		s = 1<<31 - 1
	}
	return int32(s)
}

// sandboxPath is the path of sandbox id, with suffix.
func sandboxPath(id, suffix string) string {
	return "/sandboxes/" + url.PathEscape(id) + suffix
}

// Create makes a sandbox (POST /sandboxes). It is never sent twice once it
// may have reached the server: a retry could make a second sandbox.
func (c *Client) Create(ctx context.Context, req e2bapi.NewSandbox) (e2bapi.Sandbox, error) {
	cl := call{op: "create sandbox from template " + req.TemplateID, method: http.MethodPost, path: "/sandboxes", body: req, retry: notIdempotent}
	resp, err := c.do(ctx, cl)
	if err != nil {
		return e2bapi.Sandbox{}, err
	}
	return decode[e2bapi.Sandbox](cl, resp)
}

// Get describes sandbox id (GET /sandboxes/{id}), paused ones included. A
// sandbox that does not exist is an error for which IsNotFound holds.
func (c *Client) Get(ctx context.Context, id string) (e2bapi.SandboxDetail, error) {
	cl := call{op: "get sandbox " + id, method: http.MethodGet, path: sandboxPath(id, ""), retry: idempotent}
	resp, err := c.do(ctx, cl)
	if err != nil {
		return e2bapi.SandboxDetail{}, err
	}
	return decode[e2bapi.SandboxDetail](cl, resp)
}

// ListOptions filters List.
type ListOptions struct {
	// States are the states to list (none: running and paused).
	States []e2bapi.SandboxState
	// Metadata lists only sandboxes whose metadata has every pair.
	Metadata map[string]string
	// PageSize is the page size asked for (1..100; 0: the API's 100).
	PageSize int

	onePage bool // stop after the first page
}

// List returns every sandbox that matches opts (GET /v2/sandboxes), following
// X-Next-Token from page to page.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]e2bapi.ListedSandbox, error) {
	q := url.Values{}
	if len(opts.States) > 0 {
		states := make([]string, len(opts.States))
		for i, s := range opts.States {
			states[i] = string(s)
		}
		q.Set("state", strings.Join(states, ","))
	}
	if len(opts.Metadata) > 0 {
		md := url.Values{}
		for k, v := range opts.Metadata {
			md.Set(k, v)
		}
		q.Set("metadata", md.Encode())
	}
	if opts.PageSize > 0 {
		q.Set("limit", strconv.Itoa(opts.PageSize))
	}
	var all []e2bapi.ListedSandbox
	seen := map[string]bool{}
	for {
		cl := call{op: "list sandboxes", method: http.MethodGet, path: "/v2/sandboxes", query: q, retry: idempotent}
		resp, err := c.do(ctx, cl)
		if err != nil {
			return nil, err
		}
		page, err := decode[[]e2bapi.ListedSandbox](cl, resp)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		next := resp.header.Get(e2bapi.HeaderNextToken)
		if next == "" || len(page) == 0 || seen[next] || opts.onePage {
			return all, nil
		}
		seen[next] = true
		q.Set("nextToken", next)
	}
}

// Kill destroys sandbox id and its pause snapshot (DELETE /sandboxes/{id}).
// existed is false when there was no such sandbox (404), which is not an
// error.
func (c *Client) Kill(ctx context.Context, id string) (existed bool, err error) {
	_, err = c.do(ctx, call{op: "kill sandbox " + id, method: http.MethodDelete, path: sandboxPath(id, ""), retry: idempotent})
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Pause snapshots and stops sandbox id (POST /sandboxes/{id}/pause).
// paused is false when it was already paused (409), which is not an error.
func (c *Client) Pause(ctx context.Context, id string) (paused bool, err error) {
	_, err = c.do(ctx, call{op: "pause sandbox " + id, method: http.MethodPost, path: sandboxPath(id, "/pause"), retry: idempotent})
	if IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// Connect makes sandbox id run for at least timeout from now (POST
// /sandboxes/{id}/connect): a paused one is resumed (resumed is true), a
// running one keeps running and its time to live is extended, never
// shortened.
func (c *Client) Connect(ctx context.Context, id string, timeout time.Duration) (sb e2bapi.Sandbox, resumed bool, err error) {
	cl := call{op: "connect to sandbox " + id, method: http.MethodPost, path: sandboxPath(id, "/connect"), body: e2bapi.ConnectSandbox{Timeout: seconds(timeout)}, retry: idempotent}
	resp, err := c.do(ctx, cl)
	if err != nil {
		return e2bapi.Sandbox{}, false, err
	}
	sb, err = decode[e2bapi.Sandbox](cl, resp)
	return sb, resp.status == http.StatusCreated, err
}

// SetTimeout makes sandbox id end timeout from now (POST
// /sandboxes/{id}/timeout); it may shorten its life.
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	_, err := c.do(ctx, call{op: "set the timeout of sandbox " + id, method: http.MethodPost, path: sandboxPath(id, "/timeout"), body: e2bapi.SetTimeout{Timeout: seconds(timeout)}, retry: idempotent})
	return err
}

// MaxRefresh is the longest extension Refresh can ask for.
const MaxRefresh = time.Hour

// Refresh extends sandbox id's life to at least d from now (POST
// /sandboxes/{id}/refreshes; d is capped at MaxRefresh, and E2B extends by
// at least 15 s). It never shortens it.
func (c *Client) Refresh(ctx context.Context, id string, d time.Duration) error {
	d = min(d, MaxRefresh)
	_, err := c.do(ctx, call{op: "refresh sandbox " + id, method: http.MethodPost, path: sandboxPath(id, "/refreshes"), body: e2bapi.Refresh{Duration: seconds(d)}, retry: idempotent})
	return err
}

// CheckKey makes the cheapest authenticated call there is (a list of at most
// one sandbox): an error for which IsUnauthorized holds means the API key
// is wrong.
func (c *Client) CheckKey(ctx context.Context) error {
	_, err := c.List(ctx, ListOptions{PageSize: 1, onePage: true})
	return err
}
