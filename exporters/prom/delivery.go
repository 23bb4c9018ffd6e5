package prom

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Delivery counts what an exporter has done with the items (spans,
// samples, events) it was given.
type Delivery struct {
	Delivered uint64 // accepted by the destination
	Failed    uint64 // sent, or due to be sent, but lost to errors: rejected, timed out, endpoint down
	Dropped   uint64 // never sent: a full queue, shutdown
	Unsampled uint64 // left out by a sampler: never queued nor sent
}

// DeliveryCounter is implemented by exporters that count their deliveries.
// Delivery is called at every scrape and every push: it must be quick and
// safe from any goroutine, and its counts must never decrease.
type DeliveryCounter interface {
	Delivery() Delivery
}

// DeliveryFunc adapts a function to DeliveryCounter.
type DeliveryFunc func() Delivery

// Delivery calls f.
func (f DeliveryFunc) Delivery() Delivery { return f() }

// AddDelivery publishes c's counts as
// trainscope_exporter_items_total{exporter=name, outcome="delivered"|"failed"|"dropped"|"unsampled"}.
// A name can be added once.
func (e *Exporter) AddDelivery(name string, c DeliveryCounter) error {
	if name == "" || c == nil {
		return fmt.Errorf("prom: AddDelivery: want a name and a counter")
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("prom: AddDelivery: name %q is not valid UTF-8, which a label value must be", name)
	}
	return e.deliveries.add(name, c)
}

type deliveryCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	list []namedDelivery // sorted by name
}

type namedDelivery struct {
	name string
	c    DeliveryCounter
}

func newDeliveryCollector() *deliveryCollector {
	return &deliveryCollector{desc: prometheus.NewDesc("trainscope_exporter_items_total",
		"Items (spans, samples, events) other exporters delivered, failed to deliver, or dropped before sending.",
		[]string{"exporter", "outcome"}, nil)}
}

func (d *deliveryCollector) add(name string, c DeliveryCounter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, found := slices.BinarySearchFunc(d.list, name, func(n namedDelivery, name string) int {
		return strings.Compare(n.name, name)
	})
	if found {
		return fmt.Errorf("prom: AddDelivery: exporter %q already added", name)
	}
	d.list = slices.Insert(d.list, i, namedDelivery{name, c})
	return nil
}

func (d *deliveryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *deliveryCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	list := slices.Clone(d.list)
	d.mu.Unlock()
	for _, n := range list {
		v := n.c.Delivery()
		for _, o := range []struct {
			outcome string
			v       uint64
		}{{"delivered", v.Delivered}, {"failed", v.Failed}, {"dropped", v.Dropped}, {"unsampled", v.Unsampled}} {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(o.v), n.name, o.outcome)
		}
	}
}
