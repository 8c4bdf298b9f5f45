package kafka

import "time"

// SetFetchPoll sets a waiting Fetch's re-read timer bounds until restore.
// Call it before the listener starts and restore after it stopped.
func SetFetchPoll(lo, hi time.Duration) (restore func()) {
	oldLo, oldHi := fetchPollMin, fetchPollMax
	fetchPollMin, fetchPollMax = lo, hi
	return func() { fetchPollMin, fetchPollMax = oldLo, oldHi }
}
