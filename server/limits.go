package server

import (
	"fmt"
	"sync"
)

// DefaultMaxConcurrentCalls is the default of Config.MaxConcurrentCalls.
const DefaultMaxConcurrentCalls = 8

// callLimiter bounds the tool calls one HTTP principal has running at once,
// so that one tenant cannot take the server's memory and workers from the
// others. It is safe for concurrent use.
type callLimiter struct {
	max     int
	mu      sync.Mutex
	running map[string]int // calls in flight by principal
}

func newCallLimiter(limit int) *callLimiter {
	return &callLimiter{max: limit, running: map[string]int{}}
}

// enter admits one call of principal, or returns the error the model reads
// when the principal already has max calls running. done ends the call.
func (l *callLimiter) enter(principal string) (done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[principal] >= l.max {
		return nil, fmt.Errorf("too many calls at once: this client already has %d tool calls running, the server's limit per principal (--max-concurrent-calls %d); wait for one to finish and retry this call, which was not run", l.running[principal], l.max)
	}
	l.running[principal]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.running[principal]--; l.running[principal] == 0 {
				delete(l.running, principal)
			}
		})
	}, nil
}
