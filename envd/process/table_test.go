//go:build linux

package process

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
)

func TestTagsAndRetention(t *testing.T) {
	tab := newTable(t, TableOptions{Retention: -1})
	older, _ := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	newer, newerSub := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	for _, withEnded := range []bool{true, false} {
		if got, _ := tab.GetTagged("t", withEnded); got != newer {
			t.Errorf("GetTagged(t, %v) picked %v, want newest pid %d", withEnded, got, newer.Pid())
		}
	}
	if list := tab.List(); len(list) != 2 || list[0] != older || list[1] != newer {
		t.Errorf("List = %v", list)
	}
	_ = newer.Signal(syscall.SIGKILL)
	collect(t, newerSub)
	// Retention is off: the ended one is gone, the older live one remains.
	for _, withEnded := range []bool{true, false} {
		if got, _ := tab.GetTagged("t", withEnded); got != older {
			t.Errorf("GetTagged(t, %v) after newest ended = %v, want pid %d", withEnded, got, older.Pid())
		}
	}
	if _, err := tab.Get(newer.Pid(), true); !errors.Is(err, ErrNotFound) || err.Error() != "process with pid "+strconv.Itoa(newer.Pid())+" not found" {
		t.Errorf("Get(ended) = %v", err)
	}
	if _, err := tab.GetTagged("nope", true); !errors.Is(err, ErrNotFound) || err.Error() != "process with tag 'nope' not found" {
		t.Errorf("GetTagged(nope) = %v", err)
	}
}
