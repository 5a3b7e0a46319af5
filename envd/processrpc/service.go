//go:build linux

// Package processrpc serves envd's Connect process.Process service (Start,
// Connect, List, SendInput, StreamInput, CloseStdin, Update, SendSignal) on
// top of an envd/process Table, with the wire semantics of E2B's envd: the
// order start → data/keepalive → end on every stream, keepalives at the
// interval of the Keepalive-Ping-Interval header, the timeout header of
// Start (Connect-Timeout-Ms, or Grpc-Timeout for gRPC and gRPC-Web) as the
// process's deadline, and E2B's error codes and messages.
//
// This package converts between protobuf and envd/process types and maps
// errors to Connect codes; spawning, fan-out and signals live in
// envd/process.
package processrpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/envd/process"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

// Timeout headers. On Start the protocol's timeout header is the process's
// deadline (see Service.Handler).
const (
	// TimeoutHeader is the Connect protocol's timeout header, in
	// milliseconds.
	TimeoutHeader = "Connect-Timeout-Ms"
	// GRPCTimeoutHeader is the timeout header of gRPC and gRPC-Web: at most
	// eight digits and a unit, one of H M S m u n.
	GRPCTimeoutHeader = "Grpc-Timeout"
)

// defaultPath is the PATH of processes when the daemon has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configures New.
type Options struct {
	// Paths resolves the cwd of Start requests (empty → its root). Nil means
	// a resolver rooted at "/" without confinement.
	Paths *paths.Resolver
	// Users gives the user a request runs as when the context carries none
	// (identity.FromContext). Nil means the daemon's own user.
	Users *identity.Resolver
	// Env is the global environment of every process: it comes after PATH,
	// HOME, USER and LOGNAME and before the request's envs; later wins.
	Env map[string]string
	// Logger receives diagnostics. Nil means slog.Default().
	Logger *slog.Logger
	// Grace bounds how long the end event of a process that has exited waits
	// for output pipes held open by background children. Zero means
	// process.DefaultGrace (200 ms).
	Grace time.Duration
	// Retention is how long an ended process stays visible to Connect. Zero
	// means process.DefaultRetention (30 s); negative means not at all.
	Retention time.Duration
}

// Service implements processconnect.ProcessHandler. It is safe for
// concurrent use.
type Service struct {
	table     *process.Table
	paths     *paths.Resolver
	users     *identity.Resolver
	pathEnv   string   // "PATH=…"
	globalEnv []string // Options.Env as "KEY=value", sorted
	log       *slog.Logger
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// New returns a Service with an empty process table.
func New(opts Options) *Service {
	s := &Service{
		table: process.NewTable(process.TableOptions{Grace: opts.Grace, Retention: opts.Retention}),
		paths: opts.Paths,
		users: opts.Users,
		log:   opts.Logger,
	}
	if s.paths == nil {
		s.paths, _ = paths.New("/", false)
	}
	if s.users == nil {
		s.users = identity.NewResolver(identity.ResolverOptions{Logger: opts.Logger})
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	s.pathEnv = "PATH=" + path
	for k, v := range opts.Env {
		s.globalEnv = append(s.globalEnv, k+"="+v)
	}
	slices.Sort(s.globalEnv)
	return s
}

// Handler returns the service's path prefix and HTTP handler, built with
// processconnect.NewProcessHandler and opts.
//
// For /process.Process/Start the handler moves the protocol's timeout header
// (Connect-Timeout-Ms, or Grpc-Timeout for gRPC and gRPC-Web) out of the
// request before connect-go sees it: the header is the process's deadline
// (the process group is killed then and the stream still carries the end
// event), not the stream's, which connect-go would cut at that very instant.
// A value of 0 means no deadline, as E2B's SDKs intend. Invalid values stay,
// for connect-go to reject. Other procedures keep connect-go's normal
// deadline handling. Mount the service with this handler: mounted without
// it, a Start request's timeout cuts its stream.
//
// Start and Connect stream through a writer that coalesces each message,
// and a burst of messages, into one write to the connection.
//
// Responses are not compressed unless opts say otherwise
// (connect.WithCompressMinBytes): process output streams in chunks of up to
// process.MaxChunkSize, usually over a local link, where gzip would only cap
// throughput.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append([]connect.HandlerOption{connect.WithCompressMinBytes(math.MaxInt32)}, opts...)
	path, h := processconnect.NewProcessHandler(s, opts...)
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case processconnect.ProcessStartProcedure:
			if dl, ok := takeDeadline(r.Header); ok {
				r = r.WithContext(context.WithValue(r.Context(), deadlineKey{}, dl))
			}
			fallthrough
		case processconnect.ProcessConnectProcedure:
			if bw, br := withBatchWriter(w, r); bw != nil {
				defer bw.finish()
				w, r = bw, br
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Close kills with SIGKILL the process group of every live process (and of
// ended ones whose background children still hold their output). Their
// streams still get end events; later Starts fail with unavailable. Calling
// Close twice is harmless.
func (s *Service) Close() { s.table.Close() }

// deadlineKey is the context key of the deadline Handler took out of a
// Start request's headers.
type deadlineKey struct{}

// deadline is the process deadline of a Start request.
type deadline struct {
	timeout time.Duration // 0: none
	header  string        // the header it came from
}

// takeDeadline removes the timeout header of the request's protocol from h
// and returns its value. It reports false, leaving h as it is, when there is
// no such header or its value is one connect-go rejects.
func takeDeadline(h http.Header) (deadline, bool) {
	// connect-go tells the protocols apart by Content-Type: application/grpc
	// and application/grpc+codec are gRPC, application/grpc-web and
	// application/grpc-web+codec gRPC-Web; both read Grpc-Timeout.
	if strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "application/grpc") {
		d, ok := parseGRPCTimeout(h.Get(GRPCTimeoutHeader))
		if ok {
			h.Del(GRPCTimeoutHeader)
		}
		return deadline{d, GRPCTimeoutHeader}, ok
	}
	v := h.Get(TimeoutHeader)
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || len(v) > 10 {
		return deadline{}, false
	}
	h.Del(TimeoutHeader)
	return deadline{time.Duration(ms) * time.Millisecond, TimeoutHeader}, true
}

// parseGRPCTimeout parses a Grpc-Timeout value as connect-go does: at most
// eight digits and a unit. A number of hours too large for a time.Duration
// means no deadline.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 || n > 99_999_999 {
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		return 0, true
	}
	return time.Duration(n) * unit, true
}

// processDeadline returns the deadline of the process a Start request
// spawns, as Handler moved it aside.
func processDeadline(ctx context.Context) deadline {
	d, _ := ctx.Value(deadlineKey{}).(deadline)
	return d
}

// find resolves a selector. Only Connect may reach a process that has ended
// (within retention); for everything else an ended process is not found, as
// in envd.
func (s *Service) find(sel *pb.ProcessSelector, withEnded bool) (*process.Process, error) {
	var p *process.Process
	var err error
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		p, err = s.table.Get(int(v.Pid), withEnded)
	case *pb.ProcessSelector_Tag:
		p, err = s.table.GetTagged(v.Tag, withEnded)
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is empty: set pid or tag"))
	}
	switch {
	case errors.Is(err, process.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return p, nil
}

// startError maps a process.Table.Start error to a Connect error.
func startError(err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, process.ErrExecutableNotFound), errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission):
		code = connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.E2BIG):
		code = connect.CodeInvalidArgument
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOMEM),
		errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		code = connect.CodeResourceExhausted
	case errors.Is(err, process.ErrClosed):
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, err)
}

// inputError maps a Process input error to a Connect error: internal for a
// missing or closed stdin (as envd), failed_precondition for input of the
// wrong kind (stdin to a PTY process, pty input to a pipe process).
func inputError(err error) error {
	switch {
	case errors.Is(err, process.ErrStdinClosed):
		return connect.NewError(connect.CodeInternal, err)
	case errors.Is(err, process.ErrTTY), errors.Is(err, process.ErrNoTTY):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// spec turns a StartRequest into a process.Spec for the request's user.
func (s *Service) spec(ctx context.Context, req *pb.StartRequest) (process.Spec, error) {
	cfg := req.GetProcess()
	invalid := func(format string, args ...any) (process.Spec, error) {
		return process.Spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
	}
	if cfg.GetCmd() == "" {
		return invalid("process.cmd is empty")
	}
	if strings.IndexByte(cfg.GetCmd(), 0) >= 0 {
		return invalid("cmd %q contains a NUL byte", cfg.GetCmd())
	}
	for _, a := range cfg.GetArgs() {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("argument %q contains a NUL byte", a)
		}
	}
	u := s.users.FromContext(ctx)
	dir, err := s.cwd(cfg.Cwd, u)
	if err != nil {
		return process.Spec{}, err
	}

	env := make([]string, 0, 4+len(s.globalEnv)+len(cfg.GetEnvs()))
	env = append(env, s.pathEnv, "HOME="+u.Home, "USER="+u.Name, "LOGNAME="+u.Name)
	env = append(env, s.globalEnv...)
	for k, v := range cfg.GetEnvs() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return invalid("env name %q is invalid", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalid("env %s: value contains a NUL byte", k)
		}
		env = append(env, k+"="+v)
	}

	spec := process.Spec{
		Config: process.Config{
			Cmd:  cfg.GetCmd(),
			Args: cfg.GetArgs(),
			Envs: cfg.GetEnvs(),
			Cwd:  cfg.Cwd,
		},
		Env:   env,
		Dir:   dir,
		Stdin: req.Stdin == nil || *req.Stdin,
		Tag:   req.GetTag(),
	}
	if dl := processDeadline(ctx); dl.timeout > 0 {
		spec.Timeout = dl.timeout
		spec.TimeoutSource = dl.header
	}
	if u.Switch {
		spec.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID}
	}
	if req.Pty != nil {
		size := ptySize(req.Pty.GetSize())
		spec.PTY = &size
	}
	return spec, nil
}

// cwd resolves and checks the working directory of a Start request.
func (s *Service) cwd(cwd *string, u identity.User) (string, error) {
	dir, err := s.paths.Resolve(derefString(cwd), u)
	if err != nil {
		ce := fsrpc.PathError(err, derefString(cwd))
		return "", connect.NewError(ce.Code(), fmt.Errorf("cwd: %w", ce.Unwrap()))
	}
	shown := derefString(cwd)
	if shown == "" {
		shown = dir
	}
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", shown))
	case errors.Is(err, fs.ErrPermission):
		return "", connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cwd '%s': %w", shown, errors.Unwrap(err)))
	case err != nil:
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s': %w", shown, errors.Unwrap(err)))
	case !info.IsDir():
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' is not a directory", shown))
	}
	return dir, nil
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptySize(sz *pb.PTY_Size) process.Size {
	clamp := func(v uint32) uint16 { return uint16(min(v, math.MaxUint16)) }
	return process.Size{Cols: clamp(sz.GetCols()), Rows: clamp(sz.GetRows())}
}
