package tools

import (
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
)

// read_files sends each file's content once: in a content block of its own
// (text, base64 as text, or an image), which the entry names by its index
// (content_index); the JSON, in structuredContent and in the text block
// before the contents, carries only the metadata. A transport that limits
// the size of a message (WithMessageLimit) gets reads that fit: read_files
// lowers its read cap to what the limit leaves room for.

type messageLimitKey struct{}

// WithMessageLimit returns ctx for calls whose whole response may take at
// most n bytes on the wire (JSON-RPC envelope included), because the client
// refuses larger messages: read_files then returns less (truncated, with
// next_offset) rather than more than fits.
func WithMessageLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, messageLimitKey{}, n)
}

// messageLimitFrom returns the limit WithMessageLimit put in ctx, or 0.
func messageLimitFrom(ctx context.Context) int64 {
	n, _ := ctx.Value(messageLimitKey{}).(int64)
	return max(n, 0)
}

// readFilesContent sends each entry's content as a content block, in order,
// and sets the entries' content_index; first is the index of the first
// block.
func readFilesContent(out *readFilesOutput, first int) []mcp.Content {
	var blocks []mcp.Content
	for i := range out.Files {
		f := &out.Files[i]
		switch {
		case f.imageData != "":
			blocks = append(blocks, mcp.NewImageContent(f.imageData, f.MimeType))
		case f.shown != "":
			blocks = append(blocks, mcp.NewTextContent(f.shown))
		case f.Content != "":
			blocks = append(blocks, mcp.NewTextContent(f.Content))
		default:
			continue
		}
		f.ContentIdx = first + len(blocks) - 1
	}
	return blocks
}

// structuredInlineBytes is the most content (all files together, as sent)
// that structuredContent repeats, for clients that read only it (Mastra,
// for one); above it the bytes travel once, in the content blocks.
const structuredInlineBytes = 64 << 10

// structuredCopy returns out with each entry's content repeated in
// structuredContent when all the contents together are small, and false
// when they are not (structuredContent is then the text block's JSON).
// The text block's JSON never repeats them: the model reads each file
// once, in its own block.
func (out *readFilesOutput) structuredCopy() (any, bool) {
	if !out.repeatsContents() {
		return nil, false
	}
	for i := range out.Files {
		f := &out.Files[i]
		f.Inline = f.Content
		if f.imageData != "" {
			f.Inline = f.imageData
		}
	}
	return out, true
}

// repeatsContents reports whether structuredContent repeats the contents:
// when there are some and, JSON-escaped, they take at most
// structuredInlineBytes in all.
func (out *readFilesOutput) repeatsContents() bool {
	total := 0
	for _, f := range out.Files {
		if len(f.Content) > structuredInlineBytes-total {
			return false // escaping only adds: no need to scan a large file
		}
		if f.Content != "" {
			total += jsonStringLen(f.Content)
		}
		total += len(f.imageData)
		if total > structuredInlineBytes {
			return false
		}
	}
	return total > 0
}

// readCap is the most bytes this read_files call may return: the server's
// read cap, lowered to what the message limit leaves room for.
func (c *Call) readCap() int64 {
	limit := c.d.Config.MaxReadBytes
	if c.readLimit > 0 {
		limit = min(limit, c.readLimit)
	}
	return limit
}

// readFitTries bounds how often a read that did not fit the message limit
// is repeated with a lower cap.
const readFitTries = 4

// runReadFilesFitted runs read_files so that its response fits the message
// limit: with the read cap lowered to the room the limit leaves, and again
// with a lower one should the contents' encoding (escapes, base64) still
// make it too large.
func runReadFilesFitted(ctx context.Context, c *Call, in *readFilesInput) (*readFilesOutput, error) {
	if c.messageLimit <= 0 {
		return runReadFiles(ctx, c, in)
	}
	// Most text grows by a few percent when escaped; base64 by a third.
	c.readLimit = max(c.messageLimit/16*15, 1)
	if in.Encoding == "base64" {
		c.readLimit = max(c.messageLimit/4*3, 1)
	}
	notices := len(c.notices)
	for try := 1; ; try++ {
		out, err := runReadFiles(ctx, c, in)
		if err != nil {
			return nil, err
		}
		size := c.readResponseSize(out)
		if size <= c.messageLimit || try == readFitTries || c.readLimit == 1 {
			if c.readLimit < c.d.Config.MaxReadBytes && anyTruncated(out) {
				c.Notice("This transport's client takes messages of at most %d bytes, so this call returned at most %d bytes of file content; read on from next_offset.",
					c.messageLimit, c.readLimit)
			}
			return out, nil
		}
		// Scale the cap by how much too large the response was, with 1/16
		// to spare.
		c.readLimit = max(int64(float64(c.readLimit)*float64(c.messageLimit)/float64(size)*15/16), 1)
		c.notices = c.notices[:notices]
	}
}

// readResponseSize is a bound on the bytes out's response takes on the
// wire: the contents JSON-escaped, the metadata twice (structuredContent and
// the text block, escaped once more), the notices, and the envelope. While
// six times the contents (the most escaping can make of them) fits the
// limit, that is the bound, and the contents are not looked at.
func (c *Call) readResponseSize(out *readFilesOutput) int64 {
	// The envelope, _meta, the notices' block; content_index (set later).
	n := 1024 + 48*int64(len(out.Files))
	if meta, err := json.Marshal(out); err == nil {
		n += int64(len(meta)) + int64(jsonStringLen(string(meta)))
	}
	// The notices come three times: their block, and the JSON twice.
	for _, s := range c.notices {
		n += 3 * (int64(jsonStringLen(s)) + 16)
	}
	var text, images int64
	for _, f := range out.Files {
		text += int64(len(f.Content)+len(f.shown)) + 32
		if f.imageData != "" {
			images += int64(len(f.imageData)+len(f.MimeType)) + 64
		}
	}
	// Small contents come twice: structuredContent repeats them
	// (structuredCopy).
	copies := int64(1)
	if out.repeatsContents() {
		copies = 2
	}
	n += copies * images
	// Escaping at most sextuples text: count it only when that could
	// matter.
	if n+copies*6*text <= c.messageLimit {
		return n + copies*6*text
	}
	for _, f := range out.Files {
		if f.Content != "" {
			n += copies * (int64(jsonStringLen(f.Content)) + 32)
		}
		if f.shown != "" {
			n += int64(jsonStringLen(f.shown)) + 32
		}
	}
	return n
}

func anyTruncated(out *readFilesOutput) bool {
	for _, f := range out.Files {
		if f.Truncated {
			return true
		}
	}
	return false
}
