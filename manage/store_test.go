//go:build linux

package manage_test

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

func TestMemoryStoreContract(t *testing.T) {
	managetest.StoreContract(t, func(*testing.T) manage.Store { return manage.NewMemoryStore() }, false)
}
