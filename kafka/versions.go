package kafka

import (
	"reflect"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A request at a version outside the advertised range is answered
// UNSUPPORTED_VERSION when the listener can still speak that version:
// kmsg parses it and encodes the response at it, with the code in every
// error field the client reads (each topic, partition or group it named,
// for the APIs whose responses have no top-level code). Apache Kafka and
// franz-go's kfake close the connection instead; an answer tells a client
// that skipped or ignored ApiVersions (sarama takes its versions from its
// configured Kafka version) what is wrong rather than leaving it to retry.
//
// The connection is still closed for what cannot be answered: a version
// kmsg does not know (its layout is unknown, so no response can be
// encoded), a body that does not parse at the version, and a Produce with
// acks 0 (its client reads no response). ApiVersions has its own answer
// (KIP-511, conn.refuse).

// unsupportedRequest parses a request at a version the listener does not
// serve, or returns nil when it cannot be answered.
func unsupportedRequest(h header, body []byte) kmsg.Request {
	req := kmsg.RequestForKey(h.key)
	if req == nil || h.version < 0 || h.version > req.MaxVersion() {
		return nil
	}
	req.SetVersion(h.version)
	if parseBody(req, body) != nil {
		return nil
	}
	if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		return nil
	}
	return req
}

// unsupportedResponse is req's response, at its version, refusing it
// UNSUPPORTED_VERSION.
func unsupportedResponse(req kmsg.Request) kmsg.Response {
	code := kerr.UnsupportedVersion.Code
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	switch r := req.(type) {
	case *kmsg.ProduceRequest, *kmsg.ListOffsetsRequest, *kmsg.OffsetCommitRequest:
		mirrorTopics(req, resp, code)
	case *kmsg.FetchRequest:
		resp.(*kmsg.FetchResponse).ErrorCode = code
		mirrorTopics(req, resp, code)
	case *kmsg.MetadataRequest:
		mr := resp.(*kmsg.MetadataResponse)
		for _, t := range r.Topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID, mt.ErrorCode = t.Topic, t.TopicID, code
			mr.Topics = append(mr.Topics, mt)
		}
	default:
		unsupportedGroupResponse(req, resp, code)
	}
	return resp
}

// mirrorTopics fills resp's Topics from req's: each topic by name (and
// id), each of its partitions refused code. The requests and responses
// that name topics and partitions (Produce, Fetch, ListOffsets,
// OffsetCommit, OffsetFetch before v8) share that layout, field names
// included, but not their types; reflection walks them once for all.
// Every element starts from its kmsg defaults.
func mirrorTopics(req kmsg.Request, resp kmsg.Response, code int16) {
	in := reflect.ValueOf(req).Elem().FieldByName("Topics")
	out := reflect.ValueOf(resp).Elem().FieldByName("Topics")
	for i := range in.Len() {
		rt := in.Index(i)
		t := newDefault(out.Type().Elem())
		t.FieldByName("Topic").Set(rt.FieldByName("Topic"))
		if id := t.FieldByName("TopicID"); id.IsValid() && rt.FieldByName("TopicID").IsValid() {
			id.Set(rt.FieldByName("TopicID"))
		}
		parts, outParts := rt.FieldByName("Partitions"), t.FieldByName("Partitions")
		for j := range parts.Len() {
			rp := parts.Index(j)
			if rp.Kind() == reflect.Struct { // OffsetFetch names bare partition numbers
				rp = rp.FieldByName("Partition")
			}
			p := newDefault(outParts.Type().Elem())
			p.FieldByName("Partition").SetInt(rp.Int())
			p.FieldByName("ErrorCode").SetInt(int64(code))
			outParts.Set(reflect.Append(outParts, p))
		}
		out.Set(reflect.Append(out, t))
	}
}

// newDefault is a new value of a kmsg struct type with its defaults.
func newDefault(t reflect.Type) reflect.Value {
	v := reflect.New(t)
	if d, ok := v.Interface().(interface{ Default() }); ok {
		d.Default()
	}
	return v.Elem()
}

// unsupportedGroupResponse sets the top-level code of the responses that
// have one (and, for the batched versions, each group's or key's).
func unsupportedGroupResponse(req kmsg.Request, resp kmsg.Response, code int16) {
	switch r := resp.(type) {
	case *kmsg.OffsetFetchResponse:
		r.ErrorCode = code
		mirrorTopics(req, resp, code) // v0 and v1 have no top-level code
		for _, g := range req.(*kmsg.OffsetFetchRequest).Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			r.Groups = append(r.Groups, rg)
		}
	case *kmsg.FindCoordinatorResponse:
		r.ErrorCode, r.NodeID, r.Port = code, -1, -1
		for _, key := range req.(*kmsg.FindCoordinatorRequest).CoordinatorKeys {
			co := kmsg.NewFindCoordinatorResponseCoordinator()
			co.Key, co.NodeID, co.Port, co.ErrorCode = key, -1, -1, code
			r.Coordinators = append(r.Coordinators, co)
		}
	case *kmsg.JoinGroupResponse:
		r.ErrorCode, r.Generation = code, -1
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.SASLHandshakeResponse:
		r.ErrorCode = code
	case *kmsg.InitProducerIDResponse:
		r.ErrorCode, r.ProducerID, r.ProducerEpoch = code, -1, -1
	case *kmsg.SASLAuthenticateResponse:
		r.ErrorCode = code
	}
}
