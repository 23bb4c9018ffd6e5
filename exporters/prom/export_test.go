package prom

import "time"

// WithReadTimeout sets the /metrics server's ReadTimeout (default a
// minute), so that tests need not wait that long.
func WithReadTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.readTimeout = d })
}
