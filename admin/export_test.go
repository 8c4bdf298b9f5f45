package admin

import "time"

// SetIdleTimeout shortens the endpoint's keep-alive idle timeout for
// endpoints started after it; the returned func restores it.
func SetIdleTimeout(d time.Duration) (restore func()) {
	old := idleTimeout
	idleTimeout = d
	return func() { idleTimeout = old }
}
