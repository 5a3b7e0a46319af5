package envdclient

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// processCodec is the binary protobuf codec of the Process client. It
// differs from connect-go's only in how it decodes the output events of
// Start and Connect streams: their payload goes into a recycled buffer
// (see outputBuffer) instead of a new one per message, which under bulk
// output is most of what the client allocates. Every other message, and an
// output event in any but the plain encoding envd sends, is decoded by
// proto.Unmarshal. It has no MarshalStable: connect-go uses that only for
// HTTP GET calls of side-effect-free methods, which Process has none of.
type processCodec struct{}

func (processCodec) Name() string   { return "proto" }
func (processCodec) IsBinary() bool { return true }

func (processCodec) Marshal(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", msg)
	}
	return proto.Marshal(m)
}

func (processCodec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", msg)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (processCodec) Unmarshal(data []byte, msg any) error {
	var ev **process.ProcessEvent
	switch m := msg.(type) {
	case *process.StartResponse:
		ev = &m.Event
	case *process.ConnectResponse:
		ev = &m.Event
	}
	if ev != nil {
		if d, ok := decodeDataEvent(data); ok {
			*ev = &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
			return nil
		}
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", msg)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", msg, err)
	}
	return nil
}

// decodeDataEvent decodes a Start or Connect response that holds exactly one
// data event with exactly one output field, and nothing else: what envd
// sends for every chunk of output. Anything else reports false, for
// proto.Unmarshal to decode.
func decodeDataEvent(b []byte) (*process.ProcessEvent_DataEvent, bool) {
	num, event, ok := onlyField(b)
	if !ok || num != 1 { // StartResponse.event, ConnectResponse.event
		return nil, false
	}
	num, data, ok := onlyField(event)
	if !ok || num != 2 { // ProcessEvent.data
		return nil, false
	}
	num, payload, ok := onlyField(data)
	if !ok || num < 1 || num > 3 { // stdout, stderr, pty
		return nil, false
	}
	out := outputBuffer(len(payload))
	copy(out, payload)
	d := &process.ProcessEvent_DataEvent{}
	switch num {
	case 1:
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: out}
	case 2:
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: out}
	default:
		d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: out}
	}
	return d, true
}

// onlyField returns the number and contents of b's only field when that is
// of wire type bytes.
func onlyField(b []byte) (protowire.Number, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return 0, nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return 0, nil, false
	}
	return num, v, true
}

// Output buffers are recycled in size classes of powers of two from
// minPooledOutput to maxPooledOutput; smaller and larger ones are left to
// the garbage collector.
const (
	minPooledShift  = 12 // 4 KiB
	maxPooledShift  = 22 // 4 MiB
	minPooledOutput = 1 << minPooledShift
)

var outputPools [maxPooledShift - minPooledShift + 1]sync.Pool

// outputBuffer returns a buffer of n bytes, recycled when its size class is
// pooled.
func outputBuffer(n int) []byte {
	if n < minPooledOutput {
		return make([]byte, n)
	}
	shift := bits.Len(uint(n - 1))
	if shift > maxPooledShift {
		return make([]byte, n)
	}
	if b, ok := outputPools[shift-minPooledShift].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<shift)
}

// releaseOutput recycles b, which must not be used afterwards. A buffer
// outputBuffer did not pool is left alone.
func releaseOutput(b []byte) {
	c := cap(b)
	if c < minPooledOutput || c&(c-1) != 0 {
		return
	}
	shift := bits.Len(uint(c - 1))
	if shift > maxPooledShift {
		return
	}
	b = b[:0]
	outputPools[shift-minPooledShift].Put(&b)
}

// releaseData recycles the output of a data event once it has been consumed.
func releaseData(d *process.ProcessEvent_DataEvent) {
	switch out := d.GetOutput().(type) {
	case *process.ProcessEvent_DataEvent_Stdout:
		releaseOutput(out.Stdout)
		out.Stdout = nil
	case *process.ProcessEvent_DataEvent_Stderr:
		releaseOutput(out.Stderr)
		out.Stderr = nil
	case *process.ProcessEvent_DataEvent_Pty:
		releaseOutput(out.Pty)
		out.Pty = nil
	}
}
