package daemon

import "log/slog"

// Version is the envd protocol version this daemon implements and reports in
// the X-Envd-Version header. E2B's SDKs gate features on it (closing stdin
// needs 0.5.2, octet-stream uploads 0.5.7, file metadata 0.6.2, watch entries
// 0.6.3, network-mount watching 0.6.4); all of those are implemented. The
// control-plane-only endpoints (/init, /freeze, …) are not.
const Version = "0.6.13"

// Config configures a Daemon. Root is required; everything else has a default.
type Config struct {
	// Root is the workspace directory: relative paths and the default working
	// directory resolve against it, and it is the daemon user's home.
	Root string
	// Confine requires every path, absolute or relative, to resolve inside
	// Root (symlinks followed). Off by default: namespaces are the boundary.
	Confine bool
	// AccessToken, when set, is required in X-Access-Token on every request
	// except GET /health; /files also accepts E2B's signed URLs.
	AccessToken string
	// DefaultUser is the user for requests that name none. Empty means the
	// daemon's own user.
	DefaultUser string
	// Env holds variables given to every process (after PATH, HOME, USER and
	// LOGNAME, before the request's own) and served by GET /envs.
	Env map[string]string
	// MaxUploadBytes caps one POST /files body; 0 means no cap.
	MaxUploadBytes int64
	// Logger receives the daemon's logs. Nil means slog.Default().
	Logger *slog.Logger
}
