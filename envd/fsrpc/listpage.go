//go:build linux

package fsrpc

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// Paged listings: an extension of ListDir that E2B's envd does not have and
// ignores. A client that sends ListPageHeader (the most entries it wants)
// gets at most that many entries, and at most ListPageMaxBytes of paths, in
// the same pre-order as a whole listing. The response carries
// ListNextHeader when more entries follow: an opaque cursor the client
// sends back in ListAfterHeader to get the next page. The answer to a paged
// request always carries ListPagedHeader, so a client can tell a paging
// envd from one that returned the whole listing. A client's memory is then
// bounded by the page, whatever the directory holds.
const (
	ListPageHeader  = "Sandbox-Mcp-List-Page"
	ListAfterHeader = "Sandbox-Mcp-List-After"
	ListNextHeader  = "Sandbox-Mcp-List-Next"
	ListPagedHeader = "Sandbox-Mcp-List-Paged"
	// ListPageMaxBytes bounds the bytes of paths in one page.
	ListPageMaxBytes = 1 << 20
	// maxListPage bounds the page size a client may ask for.
	maxListPage = 10000
)

// listPager collects one page of a listing.
type listPager struct {
	ctx   context.Context
	limit int
	bytes int
	out   []*filesystem.EntryInfo
	next  []string // the cursor of the next page: the last entry's names below root; nil when done
	full  bool
}

// parseListPage reads the paging headers of req; ok is false when the
// request is not paged.
func parseListPage(req *connect.Request[filesystem.ListDirRequest]) (limit int, after []string, ok bool, err error) {
	v := req.Header().Get(ListPageHeader)
	if v == "" {
		return 0, nil, false, nil
	}
	limit, perr := strconv.Atoi(v)
	if perr != nil || limit < 1 {
		return 0, nil, false, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s %q is not a positive number", ListPageHeader, v))
	}
	limit = min(limit, maxListPage)
	if c := req.Header().Get(ListAfterHeader); c != "" {
		raw, derr := base64.RawURLEncoding.DecodeString(c)
		if derr != nil || len(raw) == 0 {
			return 0, nil, false, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a cursor this envd issued", ListAfterHeader))
		}
		after = strings.Split(string(raw), "/")
	}
	return limit, after, true, nil
}

// encodeCursor is the ListNextHeader value for the names below the root.
func encodeCursor(names []string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(names, "/")))
}

// walk adds the entries of dir (names, the path below the root) after the
// cursor to the page, descending while depth allows. Only errors reading
// the top directory are returned.
func (p *listPager) walk(dir string, names []string, depth int, cursor []string) error {
	if err := p.ctx.Err(); err != nil {
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("list %s: %v", dir, err))
	}
	dirents, err := os.ReadDir(dir)
	if err != nil {
		if len(names) == 0 {
			return err
		}
		return nil
	}
	start := 0
	if len(cursor) > 0 {
		start = sort.Search(len(dirents), func(i int) bool { return dirents[i].Name() >= cursor[0] })
	}
	for _, d := range dirents[start:] {
		full := filepath.Join(dir, d.Name())
		here := append(names[:len(names):len(names)], d.Name())
		if len(cursor) > 0 && d.Name() == cursor[0] {
			// Listed on an earlier page; what is below it may not be.
			if depth > 1 && d.IsDir() {
				if err := p.walk(full, here, depth-1, cursor[1:]); err != nil || p.full {
					return err
				}
			}
			cursor = nil
			continue
		}
		cursor = nil
		if len(p.out) >= p.limit || p.bytes >= ListPageMaxBytes {
			p.full = true
			return nil
		}
		info, err := d.Info()
		if err != nil {
			continue // removed while listing
		}
		p.out = append(p.out, entryFromInfo(full, info))
		p.bytes += len(full) + len(p.out[len(p.out)-1].GetSymlinkTarget())
		p.next = here
		if depth > 1 && info.IsDir() {
			if err := p.walk(full, here, depth-1, nil); err != nil || p.full {
				return err
			}
		}
	}
	return nil
}
