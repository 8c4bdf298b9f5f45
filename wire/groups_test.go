package wire

import (
	"errors"
	"testing"
)

// groupMessages join allMessages (and so the round trips and the fuzz
// seeds): one populated and one zero value of each group message.
var groupMessages = []Message{
	&GroupCreate{RequestID: 1, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", Start: "offset", StartOffset: 9, StartTimeMS: 1700000000000, Shard: 2},
	&GroupSeek{RequestID: 2, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", Start: "earliest", OnlyShards: []uint32{3}},
	&GroupDescribe{RequestID: 3, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g"},
	&GroupDescribe{RequestID: 3, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", OnlyShards: []uint32{0, 2}},
	&GroupInfo{RequestID: 3, Group: "g", Shards: []GroupShard{{Shard: 1, Cursor: 5, Committed: 9, Lag: 4, InFlight: 2, Owed: 1, DeadLetters: 1, Consumers: []string{"a"}, Redeliveries: 3, CreatedAtMS: 17, Next: 8}}},
	&GroupList{RequestID: 4, Tenant: "t", Namespace: "ns", Stream: "s"},
	&GroupNames{RequestID: 4, Groups: []string{"a", "b"}},
	&GroupDelete{RequestID: 5, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", OnlyShards: []uint32{1}},
	&GroupPoll{RequestID: 6, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", Shard: 1, MaxRecords: 10, MaxBytes: 4096, WaitMS: 100, VisibilityMS: 3000, Consumer: "c1"},
	&GroupRecords{RequestID: 6, Offsets: []uint64{1, 9}, TimesMS: []int64{2, 3}, Attempts: []uint32{3, 1}, Payloads: [][]byte{[]byte("x"), {}}},
	&GroupSettle{RequestID: 7, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", Op: SettleNack, Offsets: []uint64{1}, Attempts: []uint32{2}, DelayMS: 5, VisibilityMS: 6},
	&GroupSettled{RequestID: 7, Failures: []ClaimFailure{{Offset: 1, Code: CodeStaleClaim, Message: "expired"}}},
	&GroupDeadLetters{RequestID: 8, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", From: 3, Max: 10},
	&GroupDeadList{RequestID: 8, Offsets: []uint64{3, 4}, More: true},
	&GroupRedrive{RequestID: 9, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", Offsets: []uint64{3}},
	&GroupDiscard{RequestID: 10, Tenant: "t", Namespace: "ns", Stream: "s", Group: "g", All: true},
	&GroupCount{RequestID: 10, Count: 2},
	&GroupCreate{}, &GroupPoll{}, &GroupSettle{}, &GroupRecords{}, &GroupInfo{},
}

var groupTypes = []MsgType{
	TypeGroupCreate, TypeGroupSeek, TypeGroupDescribe, TypeGroupInfo, TypeGroupList, TypeGroupNames, TypeGroupDelete,
	TypeGroupPoll, TypeGroupRecords, TypeGroupSettle, TypeGroupSettled, TypeGroupDeadLetters, TypeGroupDeadList,
	TypeGroupRedrive, TypeGroupDiscard, TypeGroupCount,
}

func init() {
	allMessages = append(allMessages, groupMessages...)
	allTypes = append(allTypes, groupTypes...)
}

func TestReservedStreamNames(t *testing.T) {
	if !IsReservedStream(GroupStreamPrefix+"jobs") || IsReservedStream("jobs") || IsReservedStream("_felix.x") {
		t.Fatal("IsReservedStream")
	}
	// The state stream's name is a valid name (the registry stores it), so
	// only the broker's boundary keeps clients off it.
	if err := ValidateName("stream", GroupStreamPrefix+"jobs"); err != nil {
		t.Fatal(err)
	}
	if err := ValidateGroupName("a/b"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("group name a/b: %v", err)
	}
}

// FuzzDecodeGroupMessage runs the control message checks from seeds of
// the group messages only, so the fuzzer starts where they are.
func FuzzDecodeGroupMessage(f *testing.F) {
	for _, m := range groupMessages {
		frame, err := AppendMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[HeaderLen:])
	}
	f.Fuzz(checkMessage)
}
