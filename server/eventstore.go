package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

// Bounds of what the event store keeps per session.
const (
	eventStoreMaxEvents = 1024
	eventStoreMaxBytes  = 8 << 20
)

// eventStore is a server.EventStore that keeps, per session, only the most
// recent events (at most maxEvents and maxBytes). mcp-go's in-memory store
// keeps every event of a session until it ends; sandbox-mcp needs an event
// store mainly because it makes the transport wait for the notification
// forwarder (without one the last progress notification of a call can be
// lost), so a bounded window of replayable history is enough. Replaying
// from an evicted event id fails with server.ErrUnknownEventID, as for an
// unknown one. It is safe for concurrent use.
type eventStore struct {
	maxEvents int
	maxBytes  int

	mu       sync.Mutex
	seq      int64
	sessions map[string]*eventLog
}

type eventLog struct {
	events []storedEvent // in store order
	bytes  int
}

type storedEvent struct {
	seq     int64
	stream  string
	message json.RawMessage
}

func newEventStore(maxEvents, maxBytes int) *eventStore {
	return &eventStore{maxEvents: maxEvents, maxBytes: maxBytes, sessions: map[string]*eventLog{}}
}

// StoreEvent implements server.EventStore.
func (s *eventStore) StoreEvent(_ context.Context, sessionID, streamID string, message json.RawMessage) (string, error) {
	msg := make(json.RawMessage, len(message))
	copy(msg, message)
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.sessions[sessionID]
	if log == nil {
		log = &eventLog{}
		s.sessions[sessionID] = log
	}
	s.seq++
	log.events = append(log.events, storedEvent{seq: s.seq, stream: streamID, message: msg})
	log.bytes += len(msg)
	drop := 0
	for len(log.events)-drop > s.maxEvents || (log.bytes > s.maxBytes && len(log.events)-drop > 1) {
		log.bytes -= len(log.events[drop].message)
		drop++
	}
	if drop > 0 {
		// Copy down so the evicted messages can be collected.
		log.events = append(log.events[:0:0], log.events[drop:]...)
	}
	return strconv.FormatInt(s.seq, 10), nil
}

// ReplayEventsAfter implements server.EventStore.
func (s *eventStore) ReplayEventsAfter(_ context.Context, sessionID, lastEventID string, send func(eventID string, message json.RawMessage) error) (string, error) {
	last, err := strconv.ParseInt(lastEventID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: %s", server.ErrUnknownEventID, lastEventID)
	}
	s.mu.Lock()
	log := s.sessions[sessionID]
	var stream string
	var tail []storedEvent
	found := false
	if log != nil {
		for i, ev := range log.events {
			if found && ev.stream == stream {
				tail = append(tail, ev)
			}
			if !found && ev.seq == last {
				found, stream = true, ev.stream
				tail = make([]storedEvent, 0, len(log.events)-i-1)
			}
		}
	}
	s.mu.Unlock()
	if !found {
		return "", fmt.Errorf("%w: %s", server.ErrUnknownEventID, lastEventID)
	}
	for _, ev := range tail {
		if err := send(strconv.FormatInt(ev.seq, 10), ev.message); err != nil {
			return "", err
		}
	}
	return stream, nil
}

// PurgeSession implements server.EventStore.
func (s *eventStore) PurgeSession(_ context.Context, sessionID string) error {
	s.mu.Lock()
	delete(s.sessions, sessionID)
	s.mu.Unlock()
	return nil
}

var _ server.EventStore = (*eventStore)(nil)
