package kafka

import (
	"testing"

	"github.com/getfelix/felix-go/wire"
)

// TestTopicMapping: each topic maps to the stream the rule says, and
// that stream maps back to a name that maps to it again (the bare name
// for a stream of the default namespace).
func TestTopicMapping(t *testing.T) {
	m := topicMapping{defaultNamespace: "default"}
	tests := []struct {
		give      string
		wantScope wire.Scope // zero: no stream
		wantTopic string     // the name the stream is listed under
	}{
		{give: "orders", wantScope: wire.Scope{Tenant: "t", Namespace: "default", Stream: "orders"}, wantTopic: "orders"},
		{give: "user-events", wantScope: wire.Scope{Tenant: "t", Namespace: "default", Stream: "user-events"}, wantTopic: "user-events"},
		{give: "default.orders", wantScope: wire.Scope{Tenant: "t", Namespace: "default", Stream: "orders"}, wantTopic: "orders"},
		{give: "kt.orders", wantScope: wire.Scope{Tenant: "t", Namespace: "kt", Stream: "orders"}, wantTopic: "kt.orders"},
		{give: "kt.orders.eu", wantScope: wire.Scope{Tenant: "t", Namespace: "kt", Stream: "orders.eu"}, wantTopic: "kt.orders.eu"},
		// A stream of the default namespace with a '.' keeps its namespace
		// in its name: "a.b" alone would be stream b of namespace a.
		{give: "default.a.b", wantScope: wire.Scope{Tenant: "t", Namespace: "default", Stream: "a.b"}, wantTopic: "default.a.b"},
		{give: "__kafka.offsets"},
		// A dotless name starting "__" is one of Kafka's internal topics
		// (__consumer_offsets), not a stream; a stream of the default
		// namespace so named keeps its namespace in its topic.
		{give: "__consumer_offsets"},
		{give: "default.__orders", wantScope: wire.Scope{Tenant: "t", Namespace: "default", Stream: "__orders"}, wantTopic: "default.__orders"},
		{give: ""},
		{give: "."},
		{give: "kt."},
		{give: ".orders"},
		{give: "has space"},
		{give: "kt.a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			s, ok := m.scope("t", tt.give)
			if want := tt.wantScope != (wire.Scope{}); ok != want || (ok && s != tt.wantScope) {
				t.Fatalf("scope(%q) = %+v, %v; want %+v, %v", tt.give, s, ok, tt.wantScope, want)
			}
			if !ok {
				if _, ok := m.commitKey("t", tt.give); ok {
					t.Errorf("commitKey(%q) is ok for a topic with no stream", tt.give)
				}
				return
			}
			name, ok := m.topic(s)
			if !ok || name != tt.wantTopic {
				t.Fatalf("topic(%+v) = %q, %v; want %q", s, name, ok, tt.wantTopic)
			}
			if back, _ := m.scope("t", name); back != s {
				t.Errorf("scope(topic(%+v)) = %+v, want the same stream", s, back)
			}
			if key, _ := m.commitKey("t", tt.give); key != s.Namespace+"."+s.Stream {
				t.Errorf("commitKey(%q) = %q, want %q", tt.give, key, s.Namespace+"."+s.Stream)
			}
		})
	}
}

// TestTopicMappingNoName: streams whose topic would name another stream,
// and the reserved namespaces, have no topic name.
func TestTopicMappingNoName(t *testing.T) {
	m := topicMapping{defaultNamespace: "apps"}
	for _, s := range []wire.Scope{
		{Tenant: "t", Namespace: "a.b", Stream: "c"},
		{Tenant: "t", Namespace: "__kafka", Stream: "offsets"},
	} {
		if name, ok := m.topic(s); ok {
			t.Errorf("topic(%+v) = %q, want none", s, name)
		}
	}
	if name, _ := m.topic(wire.Scope{Tenant: "t", Namespace: "default", Stream: "orders"}); name != "default.orders" {
		t.Errorf("with default namespace apps, default/orders is topic %q, want default.orders", name)
	}
	if s, _ := m.scope("t", "orders"); s.Namespace != "apps" {
		t.Errorf("with default namespace apps, orders maps to namespace %q", s.Namespace)
	}
}

func TestValidateDefaultNamespace(t *testing.T) {
	for _, ns := range []string{"default", "apps", "a-b_c"} {
		if err := ValidateDefaultNamespace(ns); err != nil {
			t.Errorf("ValidateDefaultNamespace(%q) = %v, want nil", ns, err)
		}
	}
	for _, ns := range []string{"", "a.b", "__kafka", "a b", ".."} {
		if ValidateDefaultNamespace(ns) == nil {
			t.Errorf("ValidateDefaultNamespace(%q) = nil, want an error", ns)
		}
	}
}
