package envdclient

// WithUnixSocketCheck has the client call check with the socket path before
// every connection it opens to a unix: endpoint. An error from check refuses
// the connection: the call fails with a *DialError wrapping it, and nothing
// is sent. A provider whose sockets live in directories someone else could
// change uses it to refuse a path that was redirected (see the local
// provider). Other endpoints ignore it.
func WithUnixSocketCheck(check func(path string) error) Option {
	return func(o *options) { o.unixSocketCheck = check }
}
