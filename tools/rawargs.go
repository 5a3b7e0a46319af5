package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// A tools/call message can be megabytes (put_files content), and mcp-go
// decodes a message many times on its way to a handler. SplitToolCall lets a
// transport take the arguments out of the message in one pass before mcp-go
// sees it: mcp-go gets the message with "arguments":{} and the handler gets
// the arguments through the call's context (WithArguments), already split
// into a small skeleton (the arguments' JSON with every long string value
// replaced by a placeholder) and the long strings, unescaped. The handler
// then decodes and validates the skeleton and puts the long strings back, so
// no JSON decoder ever walks the long strings again.

// longStringBytes is the length from which a string value of the arguments
// (quotes and escapes included) is taken out of the skeleton.
const longStringBytes = 1024

// placeholderPrefix starts every placeholder string: a NUL, then a random
// per-process nonce, so that no string a client sends can be taken for one.
var placeholderPrefix = "\x00sandbox-mcp:" + randomNonce() + ":"

// placeholderJSON is placeholderPrefix as it is written in a skeleton.
var placeholderJSON = `"\u0000` + placeholderPrefix[1:]

func randomNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Arguments are the arguments of one tools/call, taken out of its message by
// SplitToolCall.
type Arguments struct {
	tool     string
	raw      []byte   // the arguments as the client sent them
	skeleton []byte   // raw with the long string values replaced by placeholders
	long     []string // the long strings, unescaped, by placeholder index
}

// Tool is the name of the tool the arguments are for.
func (a *Arguments) Tool() string { return a.tool }

type argumentsKey struct{}

// WithArguments returns ctx carrying the arguments of the tools/call being
// served; the tool's handler takes them from there instead of from the
// request (which then holds "arguments":{}). They are used only by the tool
// they were split for.
func WithArguments(ctx context.Context, a *Arguments) context.Context {
	return context.WithValue(ctx, argumentsKey{}, a)
}

// argumentsFrom returns the arguments ctx carries for tool, or nil.
func argumentsFrom(ctx context.Context, tool string) *Arguments {
	a, _ := ctx.Value(argumentsKey{}).(*Arguments)
	if a == nil || a.tool != tool {
		return nil
	}
	return a
}

// HasArguments reports whether ctx carries split arguments for tool (the
// transport took them out of the message).
func HasArguments(ctx context.Context, tool string) bool { return argumentsFrom(ctx, tool) != nil }

// SplitToolCall takes the arguments out of msg when it is a JSON-RPC
// tools/call request of a tool known reports true for, with an object as
// arguments. It returns msg with the arguments replaced by {} and the
// arguments, or ok false when msg is anything else or anything about it is
// unusual (a duplicate or escaped member name, a name that differs from a
// member mcp-go reads only in case, invalid JSON in the arguments, a long
// string with invalid UTF-8 or a lone surrogate): such a message goes to
// mcp-go whole, and the handler decodes its arguments as before.
//
// The arguments share msg's memory (so a long message is held once): msg
// must not be modified afterwards.
//
// The rest of msg is not validated here: mcp-go parses the small message
// and answers it as it would have answered msg, since msg is valid JSON
// exactly when the small message and the arguments both are.
func SplitToolCall(msg []byte, known func(tool string) bool) (small []byte, args *Arguments, ok bool) {
	s := splitter{b: msg}
	if !s.message() || s.method != "tools/call" || s.args == nil || !known(s.tool) {
		return nil, nil, false
	}
	a := s.args
	a.tool = s.tool
	small = make([]byte, 0, len(msg)-len(a.raw)+2)
	small = append(small, msg[:s.argsStart]...)
	small = append(small, "{}"...)
	small = append(small, msg[s.argsEnd:]...)
	return small, a, true
}
