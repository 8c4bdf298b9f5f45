package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Phase is the broker as sampled at the end of one phase of the run.
type Phase struct {
	Name      string  `json:"name"`
	AtSeconds float64 `json:"at_s"`
	RSS       int64   `json:"rss_bytes"`
	FDs       int     `json:"fds"`
	Conns     float64 `json:"connections_open"`
	Subs      float64 `json:"subscriptions"`
	// HeapInuse and Goroutines are the broker's Go runtime gauges.
	HeapInuse  int64 `json:"heap_inuse_bytes"`
	Goroutines int   `json:"goroutines"`
	// LiveAtGC is half the broker's next GC goal: its live heap as of its
	// last collection (GOGC=100), which garbage does not inflate.
	LiveAtGC int64 `json:"live_heap_at_last_gc_bytes"`
}

// Summary is what a run reports. Memory and descriptors are the broker
// process's only.
type Summary struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Machine string    `json:"machine"`
	Config  config    `json:"config"`

	ConnsTarget      int     `json:"conns_target"`
	ConnsReached     int     `json:"conns_reached"`
	ConnectSeconds   float64 `json:"connect_s"`
	SubsTarget       int     `json:"subs_target"`
	SubsReached      int     `json:"subs_reached"`
	SubscribeSeconds float64 `json:"subscribe_s"`
	LoadSeconds      float64 `json:"load_s"`

	Phases         []Phase `json:"phases"`
	Samples        int     `json:"samples"`
	PeakRSS        int64   `json:"peak_rss_bytes"`        // the largest VmRSS sampled
	PeakHWM        int64   `json:"peak_vmhwm_bytes"`      // VmHWM: the kernel's own peak, between samples too
	PeakFDs        int     `json:"peak_fds"`              // the most open descriptors sampled
	PeakHeapInuse  int64   `json:"peak_heap_inuse_bytes"` // the broker's Go heap in use, sampled
	PeakGoroutines int     `json:"peak_goroutines"`
	FinalRSS       int64   `json:"final_rss_bytes"`    // at the end of the load
	FinalFDs       int     `json:"final_fds"`          // at the end of the load
	ClosedRSS      int64   `json:"closed_rss_bytes"`   // after every client closed
	ClosedFDs      int     `json:"closed_fds"`         // after every client closed
	PerConnKiB     float64 `json:"per_connection_kib"` // RSS growth while connecting, per connection
	PerSubKiB      float64 `json:"per_subscription_kib"`

	PeakConns        float64 `json:"peak_connections_open"` // the broker's gauge, hostile ones included
	PeakSubs         float64 `json:"peak_subscriptions"`
	PeakHostileConns int64   `json:"peak_hostile_connections"`
	ClosedConns      float64 `json:"closed_connections_open"`
	ClosedSubs       float64 `json:"closed_subscriptions"`

	Published       int64   `json:"published"`
	PublishedPerSec float64 `json:"published_per_s"`
	Delivered       int64   `json:"delivered"`
	DeliveredPerSec float64 `json:"delivered_per_s"`
	Missed          int64   `json:"missed"`
	Reordered       int64   `json:"reordered"`
	Lagged          int64   `json:"lagged_resumed"`
	Reads           int64   `json:"reads"`
	RecordsRead     int64   `json:"records_read"`
	Errors          int64   `json:"errors"`
	ErrorKinds      []Count `json:"error_kinds,omitempty"`

	Hostile []HostileReport `json:"hostile,omitempty"`

	BrokerMetrics        brokerMetrics  `json:"broker_metrics"` // after every client closed
	LiveFailures         int            `json:"live_failures"`
	LiveFailedAt         []string       `json:"live_failed_at,omitempty"`
	LiveAtEnd            bool           `json:"live_at_end"`
	LiveError            string         `json:"live_error,omitempty"`
	BrokerDied           bool           `json:"broker_died"`
	BrokerExit           string         `json:"broker_exit"`
	BrokerStoppedCleanly bool           `json:"broker_stopped_cleanly"`
	LogLevels            map[string]int `json:"broker_log_levels"`
	LogWorst             []logCount     `json:"broker_log_warnings,omitempty"`

	Problems []string `json:"problems,omitempty"`
	Clean    bool     `json:"clean"`
}

// printTable writes the summary for people.
func (s *Summary) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	fmt.Fprintln(tw, "\nSOAK SUMMARY\t")
	row("started", "%s, %s", s.Started.Format(time.RFC3339), s.Machine)
	row("shape", "%d conns, %d subs over %d streams (every %dth durable), %d publishers at %d msgs/s in batches of %d × %d B, %d readers, hostile %v",
		s.Config.Conns, s.Config.Subs, s.Config.Streams, s.Config.DurableOne, s.Config.Publishers, s.Config.Rate, s.Config.Batch, s.Config.Payload, s.Config.Readers, s.Config.Hostile)
	row("connections", "%d of %d in %.1f s (broker peak %.0f, hostile included)", s.ConnsReached, s.ConnsTarget, s.ConnectSeconds, s.PeakConns)
	row("subscriptions", "%d of %d in %.1f s (broker peak %.0f)", s.SubsReached, s.SubsTarget, s.SubscribeSeconds, s.PeakSubs)
	row("load", "%.0f s", s.LoadSeconds)
	row("peak RSS", "%.1f MiB sampled, %.1f MiB VmHWM", mib(s.PeakRSS), mib(s.PeakHWM))
	row("peak fds", "%d", s.PeakFDs)
	row("peak Go heap", "%.1f MiB in use, %d goroutines (the broker's runtime gauges)", mib(s.PeakHeapInuse), s.PeakGoroutines)
	row("end of load", "RSS %.1f MiB, %d fds", mib(s.FinalRSS), s.FinalFDs)
	row("after close", "RSS %.1f MiB, %d fds, broker counts %.0f connections, %.0f subscriptions", mib(s.ClosedRSS), s.ClosedFDs, s.ClosedConns, s.ClosedSubs)
	row("per connection", "%.1f KiB RSS (growth while connecting)", s.PerConnKiB)
	row("per subscription", "%.1f KiB RSS (growth while subscribing)", s.PerSubKiB)
	for _, p := range s.Phases {
		row("  phase "+p.Name, "at %5.0f s: RSS %7.1f MiB, heap %7.1f MiB (live at last GC %6.1f), %6d goroutines, %5d fds, %5.0f conns, %6.0f subs",
			p.AtSeconds, mib(p.RSS), mib(p.HeapInuse), mib(p.LiveAtGC), p.Goroutines, p.FDs, p.Conns, p.Subs)
	}
	row("published", "%d msgs (%.0f/s)", s.Published, s.PublishedPerSec)
	row("delivered", "%d msgs (%.0f/s); missed %d, out of order %d, lagged and resumed %d; broker: %.0f dropped batches",
		s.Delivered, s.DeliveredPerSec, s.Missed, s.Reordered, s.Lagged, s.BrokerMetrics.Dropped)
	row("range reads", "%d reads, %d records", s.Reads, s.RecordsRead)
	row("client errors", "%d", s.Errors)
	for _, e := range s.ErrorKinds {
		row("", "%6d × %s", e.Count, e.What)
	}
	for _, h := range s.Hostile {
		row("hostile "+h.Attack, "%d cycles: %s", h.Cycles, h.What)
		for _, o := range h.Outcomes {
			row("", "%6d × %s", o.Count, o.What)
		}
		for _, f := range h.Failed {
			row("", "%6d × could not start: %s", f.Count, f.What)
		}
	}
	row("refusals", "connections %s; quotas %s; actor restarts %.0f", mapString(s.BrokerMetrics.ConnEvents), mapString(s.BrokerMetrics.QuotaRefused), s.BrokerMetrics.Restarts)
	row("/live", "%d failures in %d samples; at the end: %v %s", s.LiveFailures, s.Samples, s.LiveAtEnd, s.LiveError)
	for _, f := range s.LiveFailedAt {
		row("", "%s", f)
	}
	row("broker", "died during the run: %v; stop: %s", s.BrokerDied, s.BrokerExit)
	row("broker log", "%s", intMapString(s.LogLevels))
	for _, c := range s.LogWorst {
		row("", "%6d × %s: %s", c.Count, c.Level, c.Message)
	}
	if s.Clean {
		row("result", "clean")
	} else {
		row("result", "NOT CLEAN: %s", strings.Join(s.Problems, "; "))
	}
	_ = tw.Flush()
}

func mapString(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func intMapString(m map[string]int) string {
	f := make(map[string]float64, len(m))
	for k, v := range m {
		f[k] = float64(v)
	}
	return mapString(f)
}
