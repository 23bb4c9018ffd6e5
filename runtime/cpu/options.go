package cpu

// Option configures New. Options are sealed: only this package makes them.
type Option interface{ apply(*config) }

type config struct {
	devices    int
	queueDepth int
	memLimit   int64
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

const (
	defaultDevices    = 64
	defaultQueueDepth = 1024
)

// WithDevices sets the number of virtual devices, cpu:0 … cpu:n−1 (default
// 64). Ranks of an in-process training run are goroutines, each bound to one
// virtual device. Values below 1 keep the default.
func WithDevices(n int) Option {
	return optionFunc(func(c *config) { c.devices = n })
}

// WithQueueDepth bounds each stream's queue of pending work (default 1024,
// like a GPU's launch queue). When a stream's queue is full, the host call
// that enqueues blocks until the stream's goroutine makes room. Values
// below 1 keep the default.
func WithQueueDepth(n int) Option {
	return optionFunc(func(c *config) { c.queueDepth = n })
}

// WithMemoryLimit caps the bytes in use on each virtual device; an
// allocation past the cap fails with StatusOutOfMemory and MemoryStats
// reports the cap as Total. The default, 0, means no cap (Total and Free
// are then reported as 0, unknown). A cap above the host's memory does
// not let an allocation past what the host has available through: that is
// refused with StatusOutOfMemory, with or without a cap.
func WithMemoryLimit(bytes int64) Option {
	return optionFunc(func(c *config) { c.memLimit = bytes })
}

// newConfig applies defaults, then options, then validation.
func newConfig(opts []Option) config {
	c := config{devices: defaultDevices, queueDepth: defaultQueueDepth}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.devices < 1 {
		c.devices = defaultDevices
	}
	if c.queueDepth < 1 {
		c.queueDepth = defaultQueueDepth
	}
	if c.memLimit < 0 {
		c.memLimit = 0
	}
	return c
}
