// Package groups owns consumer groups: a named cursor over each shard of a
// durable stream, handing records out to consumers at least once.
//
// One group actor per (stream, group, shard), felix/groups/<t>:<ns>:<s>:<g>:<n>,
// owns that group's state on that shard; nothing else changes it. Its rules
// live in core, which has no actor and no clock of its own (the actor passes
// now) and is tested directly: the cursor, which moves only over a
// contiguous run of settled offsets; claims, each with a visibility
// deadline; owed records (expired or nacked claims), handed out before new
// ones; attempt counts, and dead letters once a record reaches
// group_max_attempts; the in-flight cap (group_max_in_flight). The groups
// supervisor (felix/groups) is the one that knows which actor serves a
// group (Find), spawns one on the first request for it (Ensure; both
// answered by *Ref) and supervises it one-for-one; it does no I/O.
//
// Who messages it: the Front (front.go), the groups' side of
// service.Session on a client's goroutine, checks each call (names, the
// group.consume or group.manage right through the connection's Conn,
// limits) and asks the actor with actors.Request: Poll and Settle through the actor's bounded mailbox
// (group_queue_depth; a full one drops the request, and the drop hook
// answers it overloaded at once), Admin as a control message. The actor
// answers each to its sender and never blocks on an answer. The data shard
// messages it too: dataMoved, through the commit watch the actor holds
// while a poll is parked. The front also hands it its Handles: the data
// shard's log, read only up to its committed end, and the state shard's,
// written through that shard (Handles.Write). Handles.Live says whether it
// may still serve; when it may not (the stream was deleted, a shard stopped,
// or in a cluster another member now serves the group) the actor answers
// that error, writes nothing more, and stops.
//
// Durable state is records (record.go) of the internal state stream
// <ns>/__felix.groups.<stream>, on the same shard number, so the state is
// ordered, durable and replicated like any record: create, cursor, seek,
// dead, redrive, remove, delete. Claims are never written. The cursor is
// written after 1000 settlements or 100 ms, on a clean stop, and before a
// describe answers, always with a value that was true when set (every
// offset below it settled).
//
// At least once, and what a restart keeps: on every start (the first, after
// a panic, or a new actor after a stop) the actor forgets its memory and
// replays its state records. Every claim in flight, every owed record and
// every record acked out of order past the cursor is handed out again;
// nothing below the cursor is. A settlement of a claim from before is
// refused stale_claim, which a consumer takes as "it comes again". A kill
// of the broker also loses the cursor's moves since its last write.
//
// Where it blocks in Receive, and on nothing else: its log reads (a poll,
// the replay in Started), room in the state shard's mailbox (at most 100 ms
// a record), and, stopping, its last cursor write (at most 2 s). While a
// poll is parked (at most 256) the actor watches the data shard's
// committed end (Handles.WatchData: the shard wakes a CommitWaker, not a
// group), and serves the parked polls when it moves. An actor that served nothing for 10
// minutes and holds nothing only in memory stops; the next request starts
// it again from the state stream.
package groups
