package client

// SetInflightHook installs c's testHookInflight; call it before c's first
// publish.
func SetInflightHook(c *Client, h func(requests int, bytes int64)) { c.testHookInflight = h }
