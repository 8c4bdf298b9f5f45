package kafka

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// fakeService serves every tenant one durable stream per name, of three
// empty shards, and accepts every publish at offset 0: enough for every
// handler to run its whole path without a broker.
type fakeService struct{}

func (fakeService) Open(context.Context, service.Client) (service.Session, error) {
	return fakeSession{}, nil
}

// fakeSession answers what the Kafka listener asks; the session methods it
// never calls (consumer groups) come from the nil embedded Session, so a
// call to one would fail the fuzzer loudly.
type fakeSession struct{ service.Session }

func (fakeSession) Publish(_ context.Context, p *service.Publish, done func(service.PublishResult)) error {
	if p.Producer != nil && p.Producer.Seq == ^uint64(0) {
		done(service.PublishResult{Err: &wire.RefusedError{Reason: "unknown_producer"}})
		return nil
	}
	done(service.PublishResult{Durable: true})
	return nil
}
func (fakeSession) Subscribe(context.Context, *service.Subscribe, service.OpenSink) (*service.Subscribed, error) {
	return nil, wire.ErrInvalidRequest
}
func (fakeSession) Unsubscribe(context.Context, uint64) error { return nil }
func (fakeSession) Read(_ context.Context, r *service.Read) (*service.Records, error) {
	if r.From > 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest, "in_future: fake")
	}
	return &service.Records{}, nil
}
func (fakeSession) OffsetForTime(context.Context, wire.Scope, uint32, time.Time) (uint64, error) {
	return 0, nil
}
func (fakeSession) CreateStream(_ context.Context, s *service.StreamSpec) (*service.StreamInfo, error) {
	return &service.StreamInfo{StreamSpec: *s}, nil
}
func (fakeSession) Stream(_ context.Context, s wire.Scope) (*service.StreamInfo, error) {
	return &service.StreamInfo{StreamSpec: service.StreamSpec{Scope: s, Shards: 3, Durable: true}}, nil
}
func (fakeSession) Streams(context.Context, string, string) ([]service.StreamInfo, error) {
	return nil, nil
}
func (fakeSession) CheckCreateStream(context.Context, *service.StreamSpec) error { return nil }
func (fakeSession) DeleteStream(context.Context, wire.Scope) error               { return nil }
func (fakeSession) AuthorizeGroups(wire.Scope, bool) error                       { return nil }
func (fakeSession) ShardOwners(context.Context, wire.Scope) (*service.Topology, error) {
	return nil, wire.ErrInvalidRequest
}
func (fakeSession) InitProducer(context.Context) (uint64, error) { return 7, nil }
func (fakeSession) Replication(context.Context, wire.Scope) (string, []wire.ShardReplication, error) {
	return "", nil, nil
}
func (fakeSession) Reauthenticate(context.Context, string) error { return nil }
func (fakeSession) Close()                                       {}

// panicHooks fails the test on a recovered handler panic.
type panicHooks struct {
	noHooks
	t *testing.T
}

func (h panicHooks) Request(api, outcome string) {
	if api == "panic" {
		h.t.Errorf("a handler panicked")
	}
}

// FuzzConn feeds request frames to one connection's handlers (a fake
// service behind them): whatever the requests, nothing panics, and the
// connection ends when the client goes.
func FuzzConn(f *testing.F) {
	for key := range apis {
		req := kmsg.RequestForKey(key)
		req.SetVersion(apis[key].max)
		f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
	}
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = -1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "ns.s"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = seedBatch(codecNone, [][]byte{[]byte("v")})
	rt.Partitions = append(rt.Partitions, rp)
	produce.Topics = append(produce.Topics, rt)
	produce.SetVersion(9)
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, produce, 2))
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis = "g", "consumer", 10
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, join, 3))
	for i, req := range adminSeeds() {
		f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, req, int32(10+i)))
	}
	f.Fuzz(func(t *testing.T, frames []byte) {
		l := &Listener{cfg: Config{AnonymousTenant: "t", Advertise: "127.0.0.1:9092", MaxFetchWait: time.Millisecond, MaxRequestBytes: 1 << 20, Hooks: panicHooks{t: t}}.withDefaults(),
			svc: fakeService{}, producers: newProducerMap(16), groups: newCoordinator()}
		defer l.groups.close()
		server, client := net.Pipe()
		c := newConn(l, server, 1)
		done := make(chan struct{})
		go func() { c.serve(); close(done) }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = client.Write(frames)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("the connection did not end after its client closed (frames %x)", frames[:min(len(frames), 64)])
		}
	})
}

// TestFuzzConnSeedsAnswer: the fuzz harness really serves: an ApiVersions
// frame gets an answer.
func TestFuzzConnSeedsAnswer(t *testing.T) {
	l := &Listener{cfg: Config{AnonymousTenant: "t"}.withDefaults(), svc: fakeService{}, producers: newProducerMap(16), groups: newCoordinator()}
	defer l.groups.close()
	server, client := net.Pipe()
	c := newConn(l, server, 1)
	go c.serve()
	defer client.Close()
	_ = client.SetDeadline(time.Now().Add(5 * time.Second))
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	go func() { _, _ = client.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 9)) }()
	var hdr [8]byte
	if _, err := io.ReadFull(client, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[4:]) != 9 {
		t.Fatalf("no ApiVersions answer: %v %x", err, hdr)
	}
}

// adminSeeds are admin requests with content, each at its highest served
// version: the handlers' paths past an empty request.
func adminSeeds() []kmsg.Request {
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "orders", 3, -1
	for _, kv := range [][2]string{{"retention.ms", "3600000"}, {"cleanup.policy", "compact"}, {"x", "y"}} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = kv[0], kmsg.StringPtr(kv[1])
		ct.Configs = append(ct.Configs, c)
	}
	create.Topics = append(create.Topics, ct, ct)
	del := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr("ns.s")
	del.Topics = append(del.Topics, dt, kmsg.NewDeleteTopicsRequestTopic())
	grow := kmsg.NewPtrCreatePartitionsRequest()
	gt := kmsg.NewCreatePartitionsRequestTopic()
	gt.Topic, gt.Count = "ns.s", 9
	grow.Topics = append(grow.Topics, gt)
	describe := kmsg.NewPtrDescribeConfigsRequest()
	for _, typ := range []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeTopic, kmsg.ConfigResourceTypeBroker, 8} {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = typ, "ns.s"
		describe.Resources = append(describe.Resources, r)
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ar := kmsg.NewIncrementalAlterConfigsRequestResource()
	ar.ResourceType, ar.ResourceName = kmsg.ConfigResourceTypeTopic, "ns.s"
	for op := range kmsg.IncrementalAlterConfigOp(5) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = "retention.bytes", op, kmsg.StringPtr("-1")
		ar.Configs = append(ar.Configs, c)
	}
	alter.Resources = append(alter.Resources, ar)
	alterAll := kmsg.NewPtrAlterConfigsRequest()
	aa := kmsg.NewAlterConfigsRequestResource()
	aa.ResourceType, aa.ResourceName = kmsg.ConfigResourceTypeTopic, "orders"
	alterAll.Resources = append(alterAll.Resources, aa)
	groups := kmsg.NewPtrDescribeGroupsRequest()
	groups.Groups = []string{"g", ""}
	delGroups := kmsg.NewPtrDeleteGroupsRequest()
	delGroups.Groups = []string{"g", "h"}
	offDel := kmsg.NewPtrOffsetDeleteRequest()
	offDel.Group = "g"
	ot := kmsg.NewOffsetDeleteRequestTopic()
	ot.Topic = "ns.s"
	ot.Partitions = append(ot.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
	offDel.Topics = append(offDel.Topics, ot)
	list := kmsg.NewPtrListGroupsRequest()
	list.StatesFilter, list.TypesFilter = []string{"Empty"}, []string{"classic"}
	cluster := kmsg.NewPtrDescribeClusterRequest()
	cluster.EndpointType = 2
	out := []kmsg.Request{create, del, grow, describe, alter, alterAll, groups, delGroups, offDel, list, cluster}
	for _, req := range out {
		req.SetVersion(apis[req.Key()].max)
	}
	return out
}
