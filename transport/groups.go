package transport

import (
	"context"
	"time"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// The consumer group requests: conversions between felix/1's
// group messages and the service's types. A group_poll waits in the
// session for up to its wait_ms, holding its stream's read loop: clients
// poll on a stream of their own.

// handleGroup answers a group request; it reports false for any other
// message.
func handleGroup(ctx context.Context, r *responder, s service.Session, msg wire.Message) bool {
	switch m := msg.(type) {
	case *wire.GroupPoll:
		pctx, cancel := streamContext(ctx, r)
		defer cancel()
		answer(r, m.RequestID, func() (wire.Message, error) { return pollGroup(pctx, s, m) })
	case *wire.GroupSettle:
		answer(r, m.RequestID, func() (wire.Message, error) { return settleGroup(ctx, s, m) })
	case *wire.GroupCreate:
		answer(r, m.RequestID, func() (wire.Message, error) { return placeGroup(ctx, s, m, s.CreateGroup) })
	case *wire.GroupSeek:
		answer(r, m.RequestID, func() (wire.Message, error) { return placeGroup(ctx, s, (*wire.GroupCreate)(m), s.SeekGroup) })
	case *wire.GroupDescribe:
		answer(r, m.RequestID, func() (wire.Message, error) {
			info, err := s.DescribeGroupOn(ctx, m.Scope(), m.Group, m.OnlyShards)
			return groupInfo(m.RequestID, info), err
		})
	case *wire.GroupDelete:
		answer(r, m.RequestID, func() (wire.Message, error) {
			return &wire.OK{RequestID: m.RequestID}, s.DeleteGroupOn(ctx, (*wire.GroupDescribe)(m).Scope(), m.Group, m.OnlyShards)
		})
	case *wire.GroupList:
		answer(r, m.RequestID, func() (wire.Message, error) {
			names, err := s.Groups(ctx, m.Scope())
			return &wire.GroupNames{RequestID: m.RequestID, Groups: names}, err
		})
	case *wire.GroupDeadLetters:
		answer(r, m.RequestID, func() (wire.Message, error) {
			dl, err := s.GroupDeadLetters(ctx, service.GroupRef{Scope: m.Scope(), Group: m.Group, Shard: m.Shard}, m.From, int(m.Max))
			if err != nil {
				return nil, err
			}
			return &wire.GroupDeadList{RequestID: m.RequestID, Offsets: dl.Offsets, More: dl.More}, nil
		})
	case *wire.GroupRedrive:
		answer(r, m.RequestID, func() (wire.Message, error) { return changeDead(ctx, m, s.RedriveGroup) })
	case *wire.GroupDiscard:
		answer(r, m.RequestID, func() (wire.Message, error) { return changeDead(ctx, (*wire.GroupRedrive)(m), s.DiscardDeadLetters) })
	default:
		return false
	}
	return true
}

// streamContext ends with ctx or when the client stops reading the
// stream (it gave up waiting: STOP_SENDING cancels the stream's write side),
// so a long poll's caller that left is known to be gone.
func streamContext(ctx context.Context, r *responder) (context.Context, context.CancelFunc) {
	s, ok := r.w.(interface{ Context() context.Context })
	if !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.Context(), cancel)
	return ctx, func() { stop(); cancel() }
}

func pollGroup(ctx context.Context, s service.Session, m *wire.GroupPoll) (wire.Message, error) {
	recs, err := s.PollGroup(ctx, &service.GroupPoll{
		GroupRef:   service.GroupRef{Scope: m.Scope(), Group: m.Group, Shard: m.Shard},
		MaxRecords: int(m.MaxRecords), MaxBytes: int(m.MaxBytes),
		Wait: time.Duration(m.WaitMS) * time.Millisecond, Visibility: time.Duration(m.VisibilityMS) * time.Millisecond,
		Consumer: m.Consumer,
	})
	if err != nil {
		return nil, err
	}
	out := &wire.GroupRecords{
		RequestID: m.RequestID, Offsets: make([]uint64, len(recs)), TimesMS: make([]int64, len(recs)),
		Attempts: make([]uint32, len(recs)), Payloads: make([][]byte, len(recs)),
	}
	for i, r := range recs {
		out.Offsets[i], out.TimesMS[i], out.Attempts[i], out.Payloads[i] = r.Offset, r.Time.UnixMilli(), r.Attempts, r.Value
	}
	return out, nil
}

// settleOps maps group_settle's op to the service's.
var settleOps = map[string]service.SettleOp{
	wire.SettleAck: service.SettleAck, wire.SettleNack: service.SettleNack,
	wire.SettleExtend: service.SettleExtend, wire.SettleDeadLetter: service.SettleDeadLetter,
}

func settleGroup(ctx context.Context, s service.Session, m *wire.GroupSettle) (wire.Message, error) {
	op, ok := settleOps[m.Op]
	if !ok {
		return nil, wire.NewError(wire.CodeInvalidRequest, "op %q is not ack, nack, extend or dead_letter", m.Op)
	}
	if len(m.Offsets) != len(m.Attempts) {
		return nil, wire.NewError(wire.CodeInvalidRequest, "group_settle names %d offsets and %d attempts; one each per claim", len(m.Offsets), len(m.Attempts))
	}
	claims := make([]service.Claim, len(m.Offsets))
	for i, off := range m.Offsets {
		claims[i] = service.Claim{Offset: off, Attempt: m.Attempts[i]}
	}
	failed, err := s.SettleGroup(ctx, &service.GroupSettle{
		GroupRef: service.GroupRef{Scope: m.Scope(), Group: m.Group, Shard: m.Shard},
		Op:       op, Claims: claims,
		Delay: time.Duration(m.DelayMS) * time.Millisecond, Visibility: time.Duration(m.VisibilityMS) * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	out := &wire.GroupSettled{RequestID: m.RequestID}
	for _, f := range failed {
		out.Failures = append(out.Failures, wire.ClaimFailure{Offset: f.Offset, Code: f.Err.Code, Message: f.Err.Message})
	}
	return out, nil
}

// groupStart reads a create's or seek's start.
func groupStart(m *wire.GroupCreate) (service.GroupStart, error) {
	st := service.GroupStart{Offset: m.StartOffset, Shard: m.Shard, Time: time.UnixMilli(m.StartTimeMS), Only: m.OnlyShards}
	switch m.Start {
	case "", "latest":
		st.Kind = service.GroupStartLatest
	case "earliest":
		st.Kind = service.GroupStartEarliest
	case "offset":
		st.Kind = service.GroupStartOffset
	case "time":
		st.Kind = service.GroupStartTime
	default:
		return st, wire.NewError(wire.CodeInvalidRequest, "start %q is not latest, earliest, offset or time", m.Start)
	}
	return st, nil
}

func placeGroup(ctx context.Context, s service.Session, m *wire.GroupCreate,
	do func(context.Context, wire.Scope, string, service.GroupStart) (*service.GroupInfo, error)) (wire.Message, error) {
	st, err := groupStart(m)
	if err != nil {
		return nil, err
	}
	info, err := do(ctx, m.Scope(), m.Group, st)
	if err != nil {
		return nil, err
	}
	return groupInfo(m.RequestID, info), nil
}

func groupInfo(requestID uint64, info *service.GroupInfo) *wire.GroupInfo {
	if info == nil {
		return nil
	}
	out := &wire.GroupInfo{RequestID: requestID, Group: info.Group, Shards: make([]wire.GroupShard, len(info.Shards))}
	for i, sh := range info.Shards {
		out.Shards[i] = wire.GroupShard{
			Shard: sh.Shard, Cursor: sh.Cursor, Next: sh.Next, Committed: sh.Committed, Lag: sh.Lag,
			InFlight: sh.InFlight, Owed: sh.Owed, DeadLetters: sh.DeadLetters, Redeliveries: sh.Redeliveries,
			Consumers: sh.Consumers, CreatedAtMS: sh.CreatedAt.UnixMilli(), Waiting: sh.Waiting,
		}
	}
	return out
}

func changeDead(ctx context.Context, m *wire.GroupRedrive, do func(context.Context, service.GroupRef, []uint64, bool) (int, error)) (wire.Message, error) {
	n, err := do(ctx, service.GroupRef{Scope: m.Scope(), Group: m.Group, Shard: m.Shard}, m.Offsets, m.All)
	if err != nil {
		return nil, err
	}
	return &wire.GroupCount{RequestID: m.RequestID, Count: uint64(n)}, nil
}
