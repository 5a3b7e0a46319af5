module github.com/sandbox-mcp/sandbox-mcp

go 1.26.0

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/creack/pty v1.1.24 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/invopop/jsonschema v0.14.0 // indirect
	github.com/lmittmann/tint v1.2.1 // indirect
	github.com/mark3labs/mcp-go v1.2.1 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
