package config

import "time"

// validateGroups checks the consumer group knobs.
func (c Config) validateGroups(ck *checker) {
	if c.GroupVisibilityTimeout < time.Millisecond {
		ck.bad("group_visibility_timeout_ms", "must be at least 1, got %s", c.GroupVisibilityTimeout)
	}
	if c.GroupMaxVisibility < c.GroupVisibilityTimeout {
		ck.bad("group_max_visibility_ms", "must be at least group_visibility_timeout_ms (%s), got %s", c.GroupVisibilityTimeout, c.GroupMaxVisibility)
	}
	ck.atLeast("group_max_attempts", int64(c.GroupMaxAttempts), 1)
	ck.atMost("group_max_attempts", int64(c.GroupMaxAttempts), 1000, "attempts are counted in memory per record")
	ck.atLeast("group_max_in_flight", int64(c.GroupMaxInFlight), 1)
	ck.atMost("group_max_in_flight", int64(c.GroupMaxInFlight), 1_000_000, "every unsettled record is held in the group actor's memory")
	ck.notNegative("group_max_wait_ms", c.GroupMaxWait)
	ck.atLeast("group_queue_depth", int64(c.GroupQueueDepth), 1)
}
