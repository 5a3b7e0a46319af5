//go:build linux

package envdclient

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// The codec decodes every message as proto.Unmarshal does, output events
// through its own path and everything else through proto.Unmarshal.
func TestProcessCodecDecodesAsProto(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300<<10)
	data := func(d *process.ProcessEvent_DataEvent) *process.ProcessEvent {
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
	}
	errText := "boom"
	events := map[string]*process.ProcessEvent{
		"stdout":    data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hello\n")}}),
		"stderr":    data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: big[:5000]}}),
		"pty":       data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: big}}),
		"empty":     data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte{}}}),
		"no output": data(&process.ProcessEvent_DataEvent{}),
		"start":     {Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 42}}},
		"end":       {Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: &errText}}},
		"keepalive": {Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}},
		"nothing":   {},
	}
	for name, ev := range events {
		for _, msg := range []interface {
			proto.Message
			GetEvent() *process.ProcessEvent
		}{&process.StartResponse{Event: ev}, &process.ConnectResponse{Event: ev}} {
			wire, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			checkDecode(t, name, wire, msg)
		}
	}
}

// Encodings envd does not send, but protobuf allows, still decode as
// proto.Unmarshal does: repeated fields (last wins), unknown fields, other
// wire types.
func TestProcessCodecOtherEncodings(t *testing.T) {
	field := func(num protowire.Number, v []byte) []byte {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	stdout := func(p string) []byte { return field(2, field(1, []byte(p))) }
	for name, wire := range map[string][]byte{
		"two outputs":         field(1, field(2, append(field(1, []byte("a")), field(2, []byte("b"))...))),
		"two events":          field(1, append(stdout("a"), stdout("b")...)),
		"two responses":       append(field(1, stdout("a")), field(1, stdout("b"))...),
		"unknown output":      field(1, field(2, field(9, []byte("a")))),
		"unknown event field": field(1, append(stdout("a"), field(9, []byte("x"))...)),
		"varint output":       field(1, field(2, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7))),
	} {
		var want process.StartResponse
		if err := proto.Unmarshal(wire, &want); err != nil {
			checkDecodeFails(t, name, wire)
			continue
		}
		checkDecode(t, name, wire, &want)
	}
	checkDecodeFails(t, "truncated", stdout("hello")[:5])
}

func checkDecode(t *testing.T, name string, wire []byte, want proto.Message) {
	t.Helper()
	got := want.ProtoReflect().New().Interface()
	if err := (processCodec{}).Unmarshal(wire, got); err != nil {
		t.Fatalf("%s: Unmarshal: %v", name, err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("%s: decoded %v, want %v", name, got, want)
	}
}

func checkDecodeFails(t *testing.T, name string, wire []byte) {
	t.Helper()
	if err := (processCodec{}).Unmarshal(wire, &process.StartResponse{}); err == nil {
		t.Errorf("%s: Unmarshal of a malformed message succeeded", name)
	}
}

func TestProcessCodecMarshals(t *testing.T) {
	msg := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "echo", Args: []string{"hi"}}}
	want, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	c := processCodec{}
	for name, f := range map[string]func() ([]byte, error){
		"Marshal":       func() ([]byte, error) { return c.Marshal(msg) },
		"MarshalAppend": func() ([]byte, error) { return c.MarshalAppend([]byte("x"), msg) },
	} {
		got, err := f()
		if name == "MarshalAppend" {
			got = bytes.TrimPrefix(got, []byte("x"))
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s = %x, %v; want %x", name, got, err, want)
		}
	}
	if _, err := c.Marshal(42); err == nil {
		t.Error("Marshal of a non-message succeeded")
	}
	if err := c.Unmarshal(nil, new(int)); err == nil {
		t.Error("Unmarshal into a non-message succeeded")
	}
}

func TestOutputBuffers(t *testing.T) {
	for _, n := range []int{0, 1, minPooledOutput - 1, minPooledOutput, minPooledOutput + 1, 32 << 10, 256<<10 + 12, 4 << 20, 4<<20 + 1} {
		b := outputBuffer(n)
		if len(b) != n {
			t.Fatalf("outputBuffer(%d) has %d bytes", n, len(b))
		}
		pooled := n >= minPooledOutput && n <= 1<<maxPooledShift
		if c := cap(b); pooled && (c < n || c&(c-1) != 0 || c >= 2*n) {
			t.Errorf("outputBuffer(%d) has capacity %d, want the next power of two", n, c)
		}
		releaseOutput(b)
	}
	// A buffer of a size class comes back from the pool for the same class.
	b := outputBuffer(100 << 10)
	b[0] = 1
	releaseOutput(b)
	if c := cap(outputBuffer(70 << 10)); c != 128<<10 {
		t.Errorf("capacity %d, want 128 KiB", c)
	}
	// Buffers of other capacities are left alone.
	releaseOutput(make([]byte, 3<<10, 5<<10))
	releaseOutput(nil)
}
