package broker

import (
	"github.com/getfelix/felix-go/durable"
	"github.com/getfelix/felix-go/member"
	"github.com/getfelix/felix-go/streams"
)

// newLogs makes the broker's durable logs over its storage settings; under
// --chaos they use the failing disk a chaos request controls.
func (b *Broker) newLogs() (*durable.Logs, error) {
	cfg := durable.Config{
		DataDir: b.cfg.DataDir, Fsync: b.cfg.DurableFsync,
		SegmentBytes: b.cfg.DurableSegmentBytes, SyncInterval: b.cfg.DurableSyncInterval,
		RetentionBytes: b.cfg.DurableRetentionBytes, RetentionAge: b.cfg.DurableRetentionAge,
		MaxOpenFiles: b.cfg.DurableMaxOpenFiles, Log: b.log,
	}
	if b.cfg.Chaos {
		cfg.FS = b.disk
	}
	return durable.New(cfg)
}

// openDurableLog opens a durable shard's log (openLog, in latency.go, is
// it with the offset gauges); a replicated shard's member prepares its
// directory first and wraps the log for raft.
func (b *Broker) openDurableLog(def streams.Def, shard uint32) (streams.Log, bool, error) {
	if def.Replicated() {
		if err := b.member.PrepareReplicaDir(def, shard); err != nil {
			return nil, false, err
		}
	}
	log, err := b.logs.Open(def, shard)
	if err != nil {
		return nil, false, err
	}
	if def.Replicated() {
		// Raft's storage makes entries durable before a replica
		// acknowledges them under on_commit (SetLazySync): the shard's
		// acknowledgement then waits for a quorum's disks, not its own
		// fsync waiter.
		return member.ReplicatedLog(log, log.Log, log.OnCommit()), false, nil
	}
	return log, log.OnCommit(), nil
}
