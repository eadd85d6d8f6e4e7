// Package proto is the typed JSON-lines protocol between the host and the
// guest agent over the virtio-serial channel. Each line is one JSON object.
// The guest speaks first with a "ready" event; every request is answered by
// zero or more "log"/"progress" events, then "result" or "error", and always
// ends with a "done" event carrying the request's ID.
package proto

import "encoding/json"

// Port is the virtio-serial port name the agent opens in the guest
// (/dev/virtio-ports/<Port>).
const Port = "org.patchbot.agent.0"

// ConsoleParam, on the kernel command line as patchbot.agent=hvcN, makes
// the agent serve on that virtio console instead of the named port: a
// remote libvirt gives streams to consoles only.
const ConsoleParam = "patchbot.agent"

// Request ops.
const (
	OpInfo     = "info"      // report uname and machine facts
	OpRunSuite = "run-suite" // run one round of a suite workload
	// OpPrepare readies the guest for a suite's rounds (its instruments
	// armed) without running one; optional: an agent with nothing to
	// prepare answers with an empty result.
	OpPrepare  = "prepare-suite"
	OpExec     = "exec"     // run a command (for tests and debugging)
	OpPowerOff = "poweroff" // sync and power the VM off
)

// Request is sent host → guest.
type Request struct {
	ID      string            `json:"id"`
	Op      string            `json:"op"`
	Suite   string            `json:"suite,omitempty"`
	Profile string            `json:"profile,omitempty"`
	Round   int               `json:"round,omitempty"`
	Params  map[string]string `json:"params,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
}

// Event types.
const (
	EventReady    = "ready"
	EventLog      = "log"
	EventProgress = "progress"
	EventResult   = "result"
	EventError    = "error"
	EventDone     = "done"
)

// Event is sent guest → host.
type Event struct {
	ID   string `json:"id,omitempty"` // the request it answers; empty for "ready"
	Type string `json:"type"`
	Msg  string `json:"msg,omitempty"`
	// KernelRelease is set on "ready" and on the "info" result.
	KernelRelease string `json:"kernel_release,omitempty"`
	// Data is the op's result payload (e.g. a suites.Result), on "result".
	Data json.RawMessage `json:"data,omitempty"`
}
