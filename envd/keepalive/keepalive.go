// Package keepalive reads the keepalive interval that envd's streams (the
// process Start and Connect streams, the filesystem WatchDir stream) send
// keepalive events at, as E2B's SDKs ask for it.
package keepalive

import (
	"net/http"
	"strconv"
	"time"
)

// Header is the request header naming the keepalive interval of a stream, in
// whole seconds.
const Header = "Keepalive-Ping-Interval"

// Default is the interval when the request names none, or one that is not
// a positive integer, as in E2B's envd.
const Default = 90 * time.Second

// Interval reads Header from h, falling back to Default.
func Interval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get(Header)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return Default
}
