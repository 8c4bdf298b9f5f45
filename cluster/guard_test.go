package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"
)

const guardSelf = "127.0.0.1:7000"

// batch is one envelope to target (id at address) of type typ, with a
// sender when withSender.
func batch(address, id, typ string, withSender bool) *remote.RemoteMessage {
	b := &remote.MessageBatch{
		TypeNames: []string{typ},
		Targets:   []*actor.PID{actor.NewPID(address, id)},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, Target: 0}},
	}
	if withSender {
		b.Senders = []*actor.PID{actor.NewPID("127.0.0.1:7001", "request$a")}
		b.Envelopes[0].Sender = 1
	}
	return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}
}

func TestCheckRemoteMessage(t *testing.T) {
	connect := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "x", Address: "127.0.0.1:7001"}},
	}}}
	clientConnect := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ClientConnection{ClientConnection: &remote.ClientConnection{SystemId: "x"}},
	}}}
	outOfRange := func(mut func(*remote.MessageEnvelope)) *remote.RemoteMessage {
		m := batch(guardSelf, nodeActorName, treeRequestType, true)
		mut(m.GetMessageBatch().Envelopes[0])
		return m
	}
	tests := []struct {
		name string
		give *remote.RemoteMessage
		// want is "" for accepted, else a part of the refusal.
		want string
	}{
		{"a member's connect request", connect, ""},
		{"a tree request to the node actor", batch(guardSelf, nodeActorName, treeRequestType, true), ""},
		{"a tree answer to a request", batch(guardSelf, "request$b", treeAnswerType, false), ""},
		{"a dead letter to a request", batch(guardSelf, "request$b", deadLetterAnswer, false), ""},
		{"a client connection", clientConnect, "not a member's"},
		{"no message", &remote.RemoteMessage{}, "kind"},
		{"a disconnect", &remote.RemoteMessage{MessageType: &remote.RemoteMessage_DisconnectRequest{DisconnectRequest: &remote.DisconnectRequest{}}}, "kind"},
		{"Stop to the registry", batch(guardSelf, "felix/registry", "actor.Stop", false), "actor.Stop to felix/registry"},
		{"Stop to the node actor", batch(guardSelf, nodeActorName, "actor.Stop", true), "actor.Stop"},
		{"PoisonPill to a shard", batch(guardSelf, "felix/streams/t:n:s:0", "actor.PoisonPill", false), "PoisonPill"},
		{"a tree request without a sender", batch(guardSelf, nodeActorName, treeRequestType, false), "felix-node"},
		{"a tree request to relay elsewhere", batch("10.0.0.9:7000", nodeActorName, treeRequestType, true), "not this member"},
		{"a tree answer to a shard", batch(guardSelf, "felix/streams/t:n:s:0", treeAnswerType, false), "felix/streams"},
		{"a target past the table", outOfRange(func(e *remote.MessageEnvelope) { e.Target = 1 }), "target 1"},
		{"a negative target", outOfRange(func(e *remote.MessageEnvelope) { e.Target = -1 }), "target -1"},
		{"a sender past the table", outOfRange(func(e *remote.MessageEnvelope) { e.Sender = 2 }), "sender 2"},
		{"a type past the table", outOfRange(func(e *remote.MessageEnvelope) { e.TypeId = 5 }), "type 5"},
		{"the JSON serializer", outOfRange(func(e *remote.MessageEnvelope) { e.SerializerId = 1 }), "serializer 1"},
		{"a serializer protoactor has not", outOfRange(func(e *remote.MessageEnvelope) { e.SerializerId = 99 }), "serializer 99"},
	}
	for _, tt := range tests {
		err := checkRemoteMessage(tt.give, guardSelf)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (!errors.Is(err, ErrRemoteRefused) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want ErrRemoteRefused saying %q", tt.name, err, tt.want)
		}
	}
}

// FuzzCheckRemoteMessage: whatever bytes a member sends, the guard never
// panics, and what it accepts is safe for protoactor's reader to index
// and deliver: every envelope's target, sender and type are in the
// batch's tables, with the protobuf serializer, to this member.
func FuzzCheckRemoteMessage(f *testing.F) {
	for _, m := range []*remote.RemoteMessage{
		batch(guardSelf, nodeActorName, treeRequestType, true),
		batch(guardSelf, "request$b", treeAnswerType, false),
		batch(guardSelf, "felix/registry", "actor.Stop", false),
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m remote.RemoteMessage
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		if checkRemoteMessage(&m, guardSelf) != nil {
			return
		}
		b := m.GetMessageBatch()
		for _, e := range b.GetEnvelopes() {
			if int(e.GetTarget()) >= len(b.GetTargets()) || int(e.GetTypeId()) >= len(b.GetTypeNames()) ||
				int(e.GetSender()) > len(b.GetSenders()) || e.GetSerializerId() != 0 || b.GetTargets()[e.GetTarget()].GetAddress() != guardSelf {
				t.Fatalf("accepted %v", &m)
			}
		}
	})
}
