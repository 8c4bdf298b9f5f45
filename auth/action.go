package auth

import (
	"fmt"
	"strings"
)

// Action is something a principal may be granted. The zero Action is no
// action: it parses from nothing and is allowed by nothing.
type Action uint8

// NOTE: when adding an action, add it to actionNames; node-wide actions go
// after ActionNodeView so IsNode stays a comparison.
const (
	// ActionStreamPublish publishes to a stream.
	ActionStreamPublish Action = iota + 1
	// ActionStreamSubscribe subscribes to a stream and reads ranges of it.
	ActionStreamSubscribe
	// ActionStreamManage creates, describes, lists and deletes streams.
	ActionStreamManage
	// ActionGroupConsume consumes from a consumer group on a stream.
	ActionGroupConsume
	// ActionGroupManage creates, changes and deletes a stream's consumer groups.
	ActionGroupManage
	// ActionCacheRead gets keys, lists them and reads counters and state.
	ActionCacheRead
	// ActionCacheWrite puts and deletes keys, adds to counters, commits.
	ActionCacheWrite
	// ActionCacheManage creates and describes caches.
	ActionCacheManage
	// ActionNodeView reads the node's tree, debug routes and tenant-labelled metrics.
	ActionNodeView
	// ActionNodeManage changes the node: chaos, drain and the like.
	ActionNodeManage
)

var actionNames = [...]string{
	ActionStreamPublish:   "stream.publish",
	ActionStreamSubscribe: "stream.subscribe",
	ActionStreamManage:    "stream.manage",
	ActionGroupConsume:    "group.consume",
	ActionGroupManage:     "group.manage",
	ActionCacheRead:       "cache.read",
	ActionCacheWrite:      "cache.write",
	ActionCacheManage:     "cache.manage",
	ActionNodeView:        "node.view",
	ActionNodeManage:      "node.manage",
}

// Actions returns every action, in declaration order.
func Actions() []Action {
	out := make([]Action, 0, len(actionNames)-1)
	for a := ActionStreamPublish; int(a) < len(actionNames); a++ {
		out = append(out, a)
	}
	return out
}

// ParseAction reads an action's name, e.g. "stream.publish". Names are
// case-sensitive.
func ParseAction(s string) (Action, error) {
	for a := ActionStreamPublish; int(a) < len(actionNames); a++ {
		if actionNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAction, s, strings.Join(actionNames[1:], ", "))
}

// Valid reports whether a is one of the declared actions.
func (a Action) Valid() bool { return a >= ActionStreamPublish && int(a) < len(actionNames) }

// IsNode reports whether a applies to the node as a whole (node.view,
// node.manage) rather than to streams in a namespace.
func (a Action) IsNode() bool { return a.Valid() && a >= ActionNodeView }

// String returns the action's name, or "action(N)" for an undeclared one.
func (a Action) String() string {
	if a.Valid() {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// MarshalText writes the action's name; an undeclared action is an error.
func (a Action) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("auth: marshal %s: not an action", a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText reads an action's name, as ParseAction.
func (a *Action) UnmarshalText(b []byte) error {
	v, err := ParseAction(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
