// Command quicraw measures what quic-go alone moves on this machine, as the
// ceiling of Felix's core delivery: a server writes records of
// -size bytes, -batch to a frame (Felix's event batch: up to 64 events or
// 64 KiB), on one unidirectional stream to each of -conns client
// connections, with Felix's QUIC settings (internal/quicconf); the clients
// count what they read. Server and clients are separate processes, as a
// broker and felix bench are.
//
//	quicraw serve --addr 127.0.0.1:0 --addr-file F --count N --size 128 --batch 64 --conns C
//	quicraw recv  --addr HOST:PORT --conns C --count N
//
// recv prints one JSON line: {"deliveries_per_s": ..., "records": ..., "seconds": ...}.
package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/quicconf"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: quicraw serve|recv [flags] (see the package comment)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "recv":
		err = recv(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve or recv", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quicraw:", err)
		os.Exit(1)
	}
}

// serve accepts conns connections and writes count records to each.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	addrFile := fs.String("addr-file", "", "write the bound address here")
	count := fs.Int("count", 1_000_000, "records per connection")
	size := fs.Int("size", 128, "record size, bytes")
	batch := fs.Int("batch", 64, "records per frame, at most 64 KiB of them")
	conns := fs.Int("conns", 1, "connections to serve")
	_ = fs.Parse(args)
	tlsConf, err := quicconf.ServerTLS("", "", os.TempDir())
	if err != nil {
		return err
	}
	tlsConf.NextProtos = []string{"quicraw"}
	ln, err := quic.ListenAddr(*addr, tlsConf, quicconf.QUICConfig())
	if err != nil {
		return err
	}
	defer ln.Close()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	frame := buildFrame(min(*batch, max(1, (64<<10)/(*size+4))), *size)
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for range *conns {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- send(conn, frame, *count)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// buildFrame is one frame of n records: u32 count, then u32 length and
// the payload for each, as Felix's event batch lays them out.
func buildFrame(n, size int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	payload := make([]byte, size)
	for range n {
		b = binary.BigEndian.AppendUint32(b, uint32(size))
		b = append(b, payload...)
	}
	return b
}

// send writes frames until count records went, then waits for the client
// to hang up (so nothing is cut off in flight).
func send(conn *quic.Conn, frame []byte, count int) error {
	st, err := conn.OpenUniStreamSync(context.Background())
	if err != nil {
		return err
	}
	per := int(binary.BigEndian.Uint32(frame))
	hdr := make([]byte, 4)
	for sent := 0; sent < count; sent += per {
		binary.BigEndian.PutUint32(hdr, uint32(len(frame)))
		if _, err := st.Write(hdr); err != nil {
			return err
		}
		if _, err := st.Write(frame); err != nil {
			return err
		}
	}
	if err := st.Close(); err != nil {
		return err
	}
	<-conn.Context().Done()
	return nil
}

// recv dials conns connections and reads every record.
func recv(args []string) error {
	fs := flag.NewFlagSet("recv", flag.ExitOnError)
	addr := fs.String("addr", "", "the server's address")
	conns := fs.Int("conns", 1, "connections")
	count := fs.Int("count", 1_000_000, "records per connection (at least)")
	_ = fs.Parse(args)
	tlsConf, err := quicconf.ClientTLS("", true)
	if err != nil {
		return err
	}
	tlsConf.NextProtos = []string{"quicraw"}
	var wg sync.WaitGroup
	got := make([]int, *conns)
	errs := make(chan error, *conns)
	start := time.Now()
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := read(*addr, tlsConf, *count)
			got[i] = n
			errs <- err
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	total := 0
	for _, n := range got {
		total += n
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"deliveries_per_s": float64(total) / elapsed.Seconds(), "records": total, "seconds": elapsed.Seconds(),
	})
}

// read counts the records of one connection's stream: it reads every
// frame whole, as a client must, and takes the count from its header.
func read(addr string, tlsConf *tls.Config, count int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, tlsConf.Clone(), quicconf.QUICConfig())
	if err != nil {
		return 0, err
	}
	defer conn.CloseWithError(0, "")
	st, err := conn.AcceptUniStream(ctx)
	if err != nil {
		return 0, err
	}
	hdr := make([]byte, 4)
	var frame []byte
	n := 0
	for {
		if _, err := io.ReadFull(st, hdr); err != nil {
			if errors.Is(err, io.EOF) && n >= count {
				return n, nil
			}
			return n, fmt.Errorf("after %d records: %w", n, err)
		}
		size := int(binary.BigEndian.Uint32(hdr))
		if cap(frame) < size {
			frame = make([]byte, size)
		}
		frame = frame[:size]
		if _, err := io.ReadFull(st, frame); err != nil {
			return n, err
		}
		n += int(binary.BigEndian.Uint32(frame))
	}
}
