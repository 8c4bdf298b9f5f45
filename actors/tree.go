package actors

// Info is one node of the supervision tree: an actor's place in it, what
// it serves, its mailbox's bounds and counters, and its restarts. Its JSON
// is what GET /debug/actors serves and felix tree reads.
type Info struct {
	Path         string            `json:"path"`
	Kind         string            `json:"kind"`
	Parent       string            `json:"parent,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	MailboxDepth int               `json:"mailbox_depth"`
	MailboxBytes int64             `json:"mailbox_bytes"`
	PeakBytes    int64             `json:"mailbox_peak_bytes"`
	Capacity     int               `json:"capacity"`
	MaxBytes     int64             `json:"max_bytes,omitempty"`
	Policy       string            `json:"policy"`
	Dropped      uint64            `json:"dropped"`
	ByteDropped  uint64            `json:"byte_dropped"`
	Evicted      uint64            `json:"evicted"`
	Restarts     int64             `json:"restarts"`
	LastFailure  *Failure          `json:"last_failure,omitempty"`
}

// Tree lists the live supervision tree, parents before children. Each
// node is read from the directory, not asked of its actor, so an actor
// stuck in Receive still shows (with its growing mailbox). An actor on
// protoactor's default mailbox shows zero mailbox counters.
func (d *Directory) Tree() []Info {
	entries := d.List()
	out := make([]Info, 0, len(entries))
	for _, e := range entries {
		info := Info{
			Path:        e.PID.Id,
			Kind:        string(e.Kind),
			Parent:      Parent(e.PID.Id),
			Labels:      e.Labels,
			Restarts:    e.Restarts(),
			LastFailure: e.LastFailure(),
		}
		if m := e.Mailbox; m != nil {
			cfg := m.Config()
			info.MailboxDepth = m.UserMessageCount()
			info.MailboxBytes = m.Bytes()
			info.PeakBytes = m.PeakBytes()
			info.Capacity = cfg.Capacity
			info.MaxBytes = cfg.MaxBytes
			info.Policy = cfg.Policy.String()
			info.Dropped = m.Dropped()
			info.ByteDropped = m.ByteDropped()
			info.Evicted = m.Evicted()
		}
		out = append(out, info)
	}
	return out
}
