package readfront

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// TestReadTrace runs the scripts in testdata/*.txt against a range read's
// page (readPage) and a time lookup (offsetForTime) over an in-memory log.
// Times are seconds after an epoch. Regenerate with -rewrite; only commit
// the changes if you understand what caused them.
//
// Commands:
//
//	append at=S [n=N] [kept=S] [key=K] [codec=C]  N records (1) appended at S,
//	                                               keeping their producer's time S
//	commit n=N                                     the committed end is N
//	retain start=N                                 retention kept N..
//	read from=N [end=N] [max=N] [bytes=N]          one page, or the refusal
//	lookup at=S                                    the offset time S reaches
func TestReadTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		log := &memLog{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "append":
				var at int
				n, kept := 1, -1
				var key, codec string
				d.ScanArgs(t, "at", &at)
				d.MaybeScanArgs(t, "n", &n)
				d.MaybeScanArgs(t, "kept", &kept)
				d.MaybeScanArgs(t, "key", &key)
				d.MaybeScanArgs(t, "codec", &codec)
				var a persistence.RecordAttrs
				if kept >= 0 {
					a.Time = sec(kept)
				}
				if key != "" {
					a.Key = []byte(key)
				}
				if codec != "" {
					a.Codec = uint8(slices.Index(service.Codecs, codec) + 1)
				}
				var attrs []byte
				if a.Key != nil || !a.Time.IsZero() || a.Codec != 0 {
					attrs = persistence.EncodeRecordAttrs(a)
				}
				for range n {
					off := log.NextOffset()
					log.records = append(log.records, streams.Record{Offset: off, Time: sec(at), Value: fmt.Appendf(nil, "v%d", off), Attrs: attrs})
				}
				return fmt.Sprintf("next %d\n", log.NextOffset())
			case "commit":
				d.ScanArgs(t, "n", &log.committed)
				return ""
			case "retain":
				d.ScanArgs(t, "start", &log.start)
				return ""
			case "read":
				req := &service.Read{Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}}
				d.ScanArgs(t, "from", &req.From)
				if d.HasArg("end") {
					var end uint64
					d.ScanArgs(t, "end", &end)
					req.End = &end
				}
				d.MaybeScanArgs(t, "max", &req.MaxRecords)
				d.MaybeScanArgs(t, "bytes", &req.MaxBytes)
				page, err := readPage(log, req)
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				return pageString(page)
			case "lookup":
				var at int
				d.ScanArgs(t, "at", &at)
				log.read = 0
				off, err := offsetForTime(log, sec(at))
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				return fmt.Sprintf("offset %d (%d records read)\n", off, log.read)
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			}
		})
	})
}

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }

func pageString(p *service.Records) string {
	var b strings.Builder
	fmt.Fprintf(&b, "next=%d committed=%d start=%d records=%d\n", p.Next, p.Committed, p.Start, len(p.Records))
	for _, r := range p.Records {
		fmt.Fprintf(&b, "  %d %s at=%d", r.Offset, r.Value, int(r.Time.Sub(epoch)/time.Second))
		if r.Key != nil {
			fmt.Fprintf(&b, " key=%s", r.Key)
		}
		if r.Codec != "" {
			fmt.Fprintf(&b, " codec=%s", r.Codec)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// memLog is a log of records in memory: what readPage and offsetForTime
// ask of a shard's log (the rest of streams.Log is never called). A read
// returns at least one record, then as many as fit maxBytes of values, as
// persistence's does.
type memLog struct {
	streams.Log
	records          []streams.Record
	start, committed uint64
	// read counts the records Read returned, for a lookup's cost.
	read int
}

func (l *memLog) NextOffset() uint64  { return uint64(len(l.records)) }
func (l *memLog) StartOffset() uint64 { return l.start }
func (l *memLog) Committed() uint64   { return l.committed }

func (l *memLog) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	page := streams.ReadPage{Next: from}
	for size := 0; page.Next < l.NextOffset() && len(page.Records) < maxRecords; page.Next++ {
		r := l.records[page.Next]
		if size += len(r.Value); size > maxBytes && len(page.Records) > 0 {
			break
		}
		page.Records = append(page.Records, r)
	}
	l.read += len(page.Records)
	return page, nil
}

// OffsetForTime is the first record appended at or after t, written or not.
func (l *memLog) OffsetForTime(t time.Time) (uint64, error) {
	for _, r := range l.records {
		if r.Offset >= l.start && !r.Time.Before(t) {
			return r.Offset, nil
		}
	}
	return l.NextOffset(), nil
}
