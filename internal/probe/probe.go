// Package probe timestamps the hops of one delivery, for the latency
// breakdown in bench/latprobe. In every ordinary build (without
// the felixprobe build tag) Mark is an empty function the compiler removes,
// so the data path pays nothing; built with -tags felixprobe, Mark records
// when each hop last ran, which means something only while one message at
// a time crosses the broker, as bench/latprobe arranges. A hop that hands
// over to another goroutine is marked before the hand-over, so the marks of
// one delivery are in order but for a race bench/latprobe counts.
package probe

// Hop is one step of a publish on its way to a subscriber, in order.
type Hop uint8

// The hops, in the order one delivery passes them.
const (
	PublishCall   Hop = iota // the publisher calls Client.Publish (bench/latprobe)
	ClientWrite              // the client's publish stream writes the frame to quic-go
	TransportRead            // the transport read and decoded the publish frame
	ShardReceive             // the shard actor took the streams.Publish from its mailbox
	ShardFanout              // the shard begins to post the envelope to its feeders
	FeederReceive            // the feeder took the envelope from its queue
	FeederFlush              // the feeder posts the lanes.Deliver to its lane
	LaneReceive              // the lane took the Deliver
	WriterReceive            // the connection writer took the Deliver
	WriteStart               // the subscription's write goroutine took the write
	WriteDone                // its Stream.Write returned (quic-go has the bytes)
	ClientRead               // the client's subscription read the event batch frame
	ClientQueued             // the event goes into the subscription's channel
	Received                 // the subscriber has it from Next (bench/latprobe)
	NumHops
)

var names = [NumHops]string{
	"publish call", "client write", "transport read", "shard receive", "shard fanout",
	"feeder receive", "feeder flush", "lane receive", "writer receive",
	"write start", "write done", "client read", "client queued", "received",
}

func (h Hop) String() string {
	if h < NumHops {
		return names[h]
	}
	return "hop?"
}
