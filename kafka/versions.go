package kafka

import (
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
	case *kmsg.ProduceRequest:
		resp.(*kmsg.ProduceResponse).Topics = unsupportedProduce(r, code)
	case *kmsg.FetchRequest:
		fr := resp.(*kmsg.FetchResponse)
		fr.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			fr.Topics = append(fr.Topics, rt)
		}
	case *kmsg.ListOffsetsRequest:
		lr := resp.(*kmsg.ListOffsetsResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			lr.Topics = append(lr.Topics, rt)
		}
	case *kmsg.MetadataRequest:
		mr := resp.(*kmsg.MetadataResponse)
		for _, t := range r.Topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID, mt.ErrorCode = t.Topic, t.TopicID, code
			mr.Topics = append(mr.Topics, mt)
		}
	case *kmsg.OffsetCommitRequest:
		resp.(*kmsg.OffsetCommitResponse).Topics = unsupportedCommit(r, code)
	default:
		unsupportedGroupResponse(req, resp, code)
	}
	return resp
}

func unsupportedProduce(r *kmsg.ProduceRequest, code int16) []kmsg.ProduceResponseTopic {
	var topics []kmsg.ProduceResponseTopic
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		topics = append(topics, rt)
	}
	return topics
}

func unsupportedCommit(r *kmsg.OffsetCommitRequest, code int16) []kmsg.OffsetCommitResponseTopic {
	var topics []kmsg.OffsetCommitResponseTopic
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		topics = append(topics, rt)
	}
	return topics
}

// unsupportedGroupResponse sets the top-level code of the responses that
// have one (and, for the batched versions, each group's or key's).
func unsupportedGroupResponse(req kmsg.Request, resp kmsg.Response, code int16) {
	switch r := resp.(type) {
	case *kmsg.OffsetFetchResponse:
		r.ErrorCode = code
		of := req.(*kmsg.OffsetFetchRequest)
		for _, t := range of.Topics { // v0 and v1 have no top-level code
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		for _, g := range of.Groups {
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
