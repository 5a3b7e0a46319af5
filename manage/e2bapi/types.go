// Package e2bapi holds the wire types of E2B's management REST API (the
// sandbox subset): the request and response bodies, the error body, the
// header names and the paths. The e2b provider's client (manage/e2b) and the
// local management server (manage serve) both use them, so the two cannot
// disagree about the wire. Field names and JSON spellings follow E2B's
// OpenAPI spec; see shared/docs/envd-protocol.md §4.
package e2bapi

import "time"

// Header names.
const (
	// HeaderAPIKey carries the API key (E2B's JS SDK spells it X-API-KEY;
	// HTTP header names are case-insensitive).
	HeaderAPIKey = "X-API-Key"
	// HeaderNextToken carries the paging token of GET /v2/sandboxes.
	HeaderNextToken = "X-Next-Token"
	// HeaderTotalRunning carries the count of running sandboxes in a list.
	HeaderTotalRunning = "X-Total-Running"
	// HeaderSandboxID and HeaderSandboxPort route a request for a sandbox's
	// envd through a shared host (E2B's "sandbox.<domain>").
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	// HeaderAccessToken authenticates a request to a secure sandbox's envd.
	HeaderAccessToken = "X-Access-Token"
)

// EnvdPort is the port envd listens on inside an E2B sandbox.
const EnvdPort = 49983

// SandboxState is a sandbox's state as the API reports it.
type SandboxState string

// The states the API reports. A pausing sandbox is reported as paused; a
// killed one is not reported at all (404).
const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
)

// AutoResume is NewSandbox's autoResume object.
type AutoResume struct {
	Enabled bool `json:"enabled"`
}

// NewSandbox is the body of POST /sandboxes. Only TemplateID is required.
type NewSandbox struct {
	TemplateID string `json:"templateID"`
	// Timeout is the sandbox's time to live in seconds (API default 15).
	Timeout         int32             `json:"timeout,omitempty"`
	AutoPause       *bool             `json:"autoPause,omitempty"`
	AutoPauseMemory *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume      *AutoResume       `json:"autoResume,omitempty"`
	Secure          *bool             `json:"secure,omitempty"`
	AllowInternet   *bool             `json:"allow_internet_access,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	EnvVars         map[string]string `json:"envVars,omitempty"`
}

// Sandbox is the body of the create, resume and connect responses.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	Alias              string  `json:"alias,omitempty"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain,omitempty"`
}

// Lifecycle is SandboxDetail's lifecycle object.
type Lifecycle struct {
	AutoResume bool `json:"autoResume"`
	// OnTimeout is "kill" or "pause".
	OnTimeout string `json:"onTimeout"`
}

// ListedSandbox is one entry of GET /v2/sandboxes (and of the deprecated
// GET /sandboxes).
type ListedSandbox struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	Alias       string            `json:"alias,omitempty"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int32             `json:"cpuCount"`
	MemoryMB    int32             `json:"memoryMB"`
	DiskSizeMB  int32             `json:"diskSizeMB"`
	State       SandboxState      `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// SandboxDetail is the body of GET /sandboxes/{id}.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken     string     `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool      `json:"allowInternetAccess,omitempty"`
	Domain              *string    `json:"domain,omitempty"`
	Lifecycle           *Lifecycle `json:"lifecycle,omitempty"`
}

// ConnectSandbox is the body of POST /sandboxes/{id}/connect. Timeout (in
// seconds) is required.
type ConnectSandbox struct {
	Timeout int32 `json:"timeout"`
}

// SetTimeout is the body of POST /sandboxes/{id}/timeout.
type SetTimeout struct {
	Timeout int32 `json:"timeout"`
}

// Refresh is the body of POST /sandboxes/{id}/refreshes (Duration in
// seconds, 0..3600; the API extends by at least 15 s).
type Refresh struct {
	Duration int32 `json:"duration,omitempty"`
}

// Pause is the optional body of POST /sandboxes/{id}/pause.
type Pause struct {
	Memory *bool `json:"memory,omitempty"`
}

// Error is the API's error body.
type Error struct {
	Code      int32  `json:"code"`
	Message   string `json:"message"`
	ErrorCode string `json:"error_code,omitempty"`
}

// ProxyError is the envd proxy's JSON body for a sandbox it cannot reach
// (HTTP 502): "The sandbox was not found", or, with Port set, "The sandbox
// is running but port is not open".
type ProxyError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

// ProxyNotFoundMessage is ProxyError.Message for a sandbox that is gone,
// expired or paused without auto-resume.
const ProxyNotFoundMessage = "The sandbox was not found"

// NotFoundMessage is the API's message for an unknown sandbox id.
func NotFoundMessage(id string) string {
	return "Sandbox \"" + id + "\" doesn't exist or you don't have access to it"
}
