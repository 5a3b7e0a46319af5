package envdclient

// Output is what Run kept of one stream: all of it when it fit the capture
// limit, else the first and last bytes (head and tail) around a cut.
type Output struct {
	// Head is the start of the stream; when nothing was cut it is the whole
	// stream and Tail is empty.
	Head []byte
	// Tail is the end of the stream when bytes were cut between Head and Tail.
	Tail []byte
	// Total is the exact number of bytes the stream carried.
	Total int64
	// Truncated reports that bytes between Head and Tail were dropped.
	Truncated bool
}

// Omitted returns how many bytes were dropped between Head and Tail.
func (o Output) Omitted() int64 { return o.Total - int64(len(o.Head)) - int64(len(o.Tail)) }

// Bytes returns Head followed by Tail (a copy when both are non-empty).
func (o Output) Bytes() []byte {
	if len(o.Tail) == 0 {
		return o.Head
	}
	out := make([]byte, 0, len(o.Head)+len(o.Tail))
	return append(append(out, o.Head...), o.Tail...)
}

// capture keeps the first and last bytes of a stream within limit bytes of
// memory, and counts them all: the head fills first, then a ring holds the
// most recent bytes. When the stream fits in limit, head+ring hold all of it.
type capture struct {
	limit   int
	head    []byte
	ring    []byte
	ringPos int // next write position in ring once it is full
	ringLen int
	total   int64
}

func newCapture(limit int) *capture {
	if limit < 0 {
		limit = 0
	}
	return &capture{limit: limit}
}

func (c *capture) headCap() int { return c.limit - c.limit/2 }
func (c *capture) tailCap() int { return c.limit / 2 }

// Write records p. It never fails.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headCap() - len(c.head); room > 0 {
		take := min(room, len(p))
		c.head = append(c.head, p[:take]...)
		p = p[take:]
	}
	tc := c.tailCap()
	if len(p) == 0 || tc == 0 {
		return n, nil
	}
	if c.ring == nil {
		c.ring = make([]byte, tc)
	}
	if len(p) >= tc {
		copy(c.ring, p[len(p)-tc:])
		c.ringPos, c.ringLen = 0, tc
		return n, nil
	}
	// Copy p into the ring, wrapping at the end.
	k := copy(c.ring[c.ringPos:], p)
	if k < len(p) {
		copy(c.ring, p[k:])
	}
	c.ringPos = (c.ringPos + len(p)) % tc
	c.ringLen = min(c.ringLen+len(p), tc)
	return n, nil
}

// output returns the captured Output.
func (c *capture) output() Output {
	out := Output{Head: c.head, Total: c.total}
	if c.ringLen == 0 {
		return out
	}
	tail := make([]byte, c.ringLen)
	if c.ringLen < len(c.ring) {
		copy(tail, c.ring[:c.ringLen])
	} else {
		k := copy(tail, c.ring[c.ringPos:])
		copy(tail[k:], c.ring[:c.ringPos])
	}
	out.Tail = tail
	out.Truncated = out.Omitted() > 0
	if !out.Truncated {
		// Everything fit: present it as one piece.
		out.Head = append(out.Head, tail...)
		out.Tail = nil
	}
	return out
}
