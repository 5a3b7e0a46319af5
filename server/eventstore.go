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

// eventLog is one session's events, oldest first, in a ring that grows up
// to maxEvents entries.
type eventLog struct {
	ring  []storedEvent
	head  int // index of the oldest event
	n     int // events held
	bytes int // total message bytes held
}

// at returns the i-th oldest event.
func (l *eventLog) at(i int) storedEvent { return l.ring[(l.head+i)%len(l.ring)] }

// push appends ev, first dropping the oldest event when the ring is full at
// maxEvents.
func (l *eventLog) push(ev storedEvent, maxEvents int) {
	if l.n == len(l.ring) {
		if len(l.ring) < maxEvents {
			grown := make([]storedEvent, min(max(2*len(l.ring), 16), maxEvents))
			for i := range l.n {
				grown[i] = l.at(i)
			}
			l.ring, l.head = grown, 0
		} else {
			l.pop()
		}
	}
	l.ring[(l.head+l.n)%len(l.ring)] = ev
	l.n++
	l.bytes += len(ev.message)
}

// pop drops the oldest event.
func (l *eventLog) pop() {
	l.bytes -= len(l.ring[l.head].message)
	l.ring[l.head] = storedEvent{} // let the message be collected
	l.head = (l.head + 1) % len(l.ring)
	l.n--
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
	log.push(storedEvent{seq: s.seq, stream: streamID, message: msg}, s.maxEvents)
	for log.bytes > s.maxBytes && log.n > 1 {
		log.pop()
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
		for i := range log.n {
			ev := log.at(i)
			if found && ev.stream == stream {
				tail = append(tail, ev)
			}
			if !found && ev.seq == last {
				found, stream = true, ev.stream
				tail = make([]storedEvent, 0, log.n-i-1)
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
