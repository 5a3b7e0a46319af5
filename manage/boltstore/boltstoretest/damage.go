// Package boltstoretest damages bolt store files for tests of the store's
// recovery, the way the damage is seen in the field.
package boltstoretest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
)

// Damage kinds for Damage.
const (
	// Truncated cuts the file to 8192 bytes (its two meta pages, no data).
	Truncated = "truncated"
	// ZeroLength empties the file.
	ZeroLength = "zero length"
	// BitFlipped flips one bit in the magic number of each meta page.
	BitFlipped = "bit-flipped"
)

// Kinds are every kind of damage Damage makes.
var Kinds = []string{Truncated, ZeroLength, BitFlipped}

// Damage damages the store file in dir as how says. The file must hold
// more than its meta pages (some records were written).
func Damage(t testing.TB, dir, how string) {
	t.Helper()
	db := filepath.Join(dir, boltstore.FileName)
	if fi, err := os.Stat(db); err != nil || fi.Size() <= 8192 {
		t.Fatalf("%s: %v, %v; want more than 8192 bytes", db, fi, err)
	}
	switch how {
	case Truncated:
		if err := os.Truncate(db, 8192); err != nil {
			t.Fatal(err)
		}
	case ZeroLength:
		if err := os.Truncate(db, 0); err != nil {
			t.Fatal(err)
		}
	case BitFlipped:
		f, err := os.OpenFile(db, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, off := range []int64{16, int64(os.Getpagesize()) + 16} {
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x10
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	default:
		t.Fatalf("no damage %q", how)
	}
}
