package envdclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// The paging extension of ListDir that sandbox-mcp's envd serves (see
// envd/fsrpc's ListPageHeader); E2B's envd ignores the request headers and
// answers with the whole listing.
const (
	listPageHeader  = "Sandbox-Mcp-List-Page"
	listAfterHeader = "Sandbox-Mcp-List-After"
	listNextHeader  = "Sandbox-Mcp-List-Next"
	listPagedHeader = "Sandbox-Mcp-List-Paged"
)

// walkPageEntries is how many entries WalkDir asks for per page (tests
// change it).
var walkPageEntries = 2048

// maxUnpagedListBytes bounds the response of an envd that does not page
// listings (E2B's): a larger one fails WalkDir with resource_exhausted
// instead of growing the caller's memory without bound.
const maxUnpagedListBytes = 64 << 20

// ErrStopWalk, returned by a WalkDir callback, ends the walk early without
// an error.
var ErrStopWalk = errors.New("stop walk")

// WalkDir lists path to depth levels (0 is treated as 1) as ListDir does,
// in the same order, calling fn with each entry. It fetches the listing in
// pages (2048 entries, at most 1 MiB of paths) from an envd that pages (sandbox-mcp's), so the
// memory it holds is one page whatever the directory holds, and stops
// fetching as soon as fn returns ErrStopWalk (WalkDir then returns nil) or
// another error (returned as is). From an envd that does not page, the
// whole listing arrives at once, up to 64 MiB.
func (c *Client) WalkDir(ctx context.Context, path string, depth uint32, fn func(Entry) error) error {
	cursor := ""
	for {
		req := connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: depth})
		req.Header().Set(listPageHeader, strconv.Itoa(walkPageEntries))
		if cursor != "" {
			req.Header().Set(listAfterHeader, cursor)
		}
		resp, err := c.walkFiles.ListDir(ctx, req)
		if err != nil {
			if connect.CodeOf(err) == connect.CodeResourceExhausted {
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("list %s: the listing is larger than %d MiB and this envd does not page listings; list a smaller directory or depth", path, maxUnpagedListBytes>>20))
			}
			return wrapCallError("list "+path, err)
		}
		entries := resp.Msg.GetEntries()
		resp.Msg.Entries = nil
		for i, e := range entries {
			entries[i] = nil // what fn has seen can be collected
			if err := fn(entryFrom(e)); err != nil {
				if errors.Is(err, ErrStopWalk) {
					return nil
				}
				return err
			}
		}
		next := resp.Header().Get(listNextHeader)
		if resp.Header().Get(listPagedHeader) == "" || next == "" {
			return nil
		}
		if next == cursor {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("list %s: envd returned the same page cursor twice", path))
		}
		cursor = next
	}
}
