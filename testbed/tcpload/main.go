// Command tcpload is the PEP benchmark's traffic: a request/response server and the
// clients that measure short-flow completion, connection rate and many idle connections.
//
// Protocol (one per connection, repeated until the client closes): the client sends an
// 8-byte header (request size, response size: u32 big-endian) and the request bytes; the
// server reads them and answers with the response bytes. A 1/1 exchange is an echo.
//
//	tcpload serve ADDR...                         listen on each host:port; prints "ready"
//	tcpload flows -targets A,B -clients 64 -request 10000 -response 10000 -seconds 5
//	    one flow = connect, request, whole response, close; prints JSON (flows/s, p50/p99);
//	    with -socks5 HOST:PORT each flow connects through that SOCKS5 proxy (no
//	    authentication, CONNECT to the target; greeting and request sent at once)
//	tcpload idle -targets A,B -count 18000
//	    opens -count connections, each checked with a 1-byte exchange (3 attempts), prints
//	    JSON (open, failed attempts), then
//	    holds them until stdin closes (one process holds at most RLIMIT_NOFILE of them)
//
// Written in Go so that the client is not what limits a run on two cores.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tcpload serve|flows|idle ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "flows":
		err = flows(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpload:", err)
		os.Exit(1)
	}
}

// ---- server ----------------------------------------------------------------------------

func serve(addrs []string) error {
	if len(addrs) == 0 {
		return errors.New("serve needs at least one host:port")
	}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		go acceptLoop(ln)
	}
	fmt.Println("ready")
	select {}
}

func acceptLoop(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			// Out of descriptors: wait instead of spinning; the client sees a slow accept.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go answer(conn)
	}
}

var zeros = make([]byte, 1<<20)

func answer(conn net.Conn) {
	defer conn.Close()
	header := make([]byte, 8)
	var sink []byte
	for {
		if _, err := io.ReadFull(conn, header); err != nil {
			return
		}
		request := int(binary.BigEndian.Uint32(header[0:4]))
		response := int(binary.BigEndian.Uint32(header[4:8]))
		if sink == nil && request > 0 {
			sink = make([]byte, 64<<10)
		}
		for request > 0 {
			n, err := conn.Read(sink[:min(request, len(sink))])
			if err != nil {
				return
			}
			request -= n
		}
		for response > 0 {
			n, err := conn.Write(zeros[:min(response, len(zeros))])
			if err != nil {
				return
			}
			response -= n
		}
	}
}

// ---- clients ---------------------------------------------------------------------------

// exchange sends one request and reads the whole response.
func exchange(conn net.Conn, request, response int, buf []byte) error {
	header := make([]byte, 8, 8+request)
	binary.BigEndian.PutUint32(header[0:4], uint32(request))
	binary.BigEndian.PutUint32(header[4:8], uint32(response))
	if _, err := conn.Write(append(header, zeros[:request]...)); err != nil {
		return err
	}
	for response > 0 {
		n, err := conn.Read(buf[:min(response, len(buf))])
		if err != nil {
			return fmt.Errorf("response short by %d bytes: %w", response, err)
		}
		response -= n
	}
	return nil
}

type flowResult struct {
	Flows      int     `json:"flows"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	FlowsPerS  float64 `json:"flows_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
}

func flows(args []string) error {
	fs := flag.NewFlagSet("flows", flag.ExitOnError)
	targets := fs.String("targets", "", "host:port,... (round robin)")
	clients := fs.Int("clients", 64, "concurrent clients")
	request := fs.Int("request", 1, "request bytes")
	response := fs.Int("response", 1, "response bytes")
	seconds := fs.Float64("seconds", 5, "duration")
	socks5 := fs.String("socks5", "", "host:port of a SOCKS5 proxy to connect through")
	_ = fs.Parse(args)
	addrs := strings.Split(*targets, ",")
	if *targets == "" || *request > len(zeros) {
		return errors.New("flows needs -targets and a request of at most 1 MiB")
	}
	dial := dialDirect
	if *socks5 != "" {
		dial = func(addr string) (net.Conn, error) { return dialSocks5(*socks5, addr) }
	}
	var (
		mu        sync.Mutex
		durations []time.Duration
		errCount  atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(time.Duration(*seconds * float64(time.Second)))
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			local := make([]time.Duration, 0, 4096)
			for i := c; time.Now().Before(end); i += *clients {
				t0 := time.Now()
				err := oneFlow(dial, addrs[i%len(addrs)], *request, *response, buf)
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			durations = append(durations, local...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	result := flowResult{
		Flows: len(durations), Errors: int(errCount.Load()), Seconds: elapsed,
		FlowsPerS: float64(len(durations)) / elapsed,
		P50Ms:     quantileMs(durations, 0.50), P90Ms: quantileMs(durations, 0.90),
		P99Ms: quantileMs(durations, 0.99), MaxMs: quantileMs(durations, 1.0),
	}
	if e, ok := firstErr.Load().(string); ok {
		result.FirstError = e
	}
	return json.NewEncoder(os.Stdout).Encode(result)
}

func dialDirect(addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, 10*time.Second)
}

// dialSocks5 connects to addr (an IPv4 or IPv6 literal) through a SOCKS5 proxy: greeting
// (no authentication) and CONNECT in one write, then the method reply and the CONNECT
// reply (RFC 1928), whose bound address is read and dropped.
func dialSocks5(proxy, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return nil, fmt.Errorf("socks5 target %q: an IP literal and a port", addr)
	}
	var port uint16
	if _, err := fmt.Sscan(portText, &port); err != nil {
		return nil, err
	}
	hello := []byte{5, 1, 0, 5, 1, 0, 1}
	if v4 := ip.To4(); v4 != nil {
		hello = append(hello, v4...)
	} else {
		hello[6] = 4
		hello = append(hello, ip.To16()...)
	}
	hello = binary.BigEndian.AppendUint16(hello, port)
	conn, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	reply := make([]byte, 2+4+16+2)
	if _, err := conn.Write(hello); err == nil {
		_, err = io.ReadFull(conn, reply[:6])
	}
	if err == nil && (reply[1] != 0 || reply[3] != 0) {
		err = fmt.Errorf("socks5: method %d, reply %d", reply[1], reply[3])
	}
	if err == nil {
		size := map[byte]int{1: 4, 4: 16}[reply[5]] + 2
		_, err = io.ReadFull(conn, reply[6:6+size])
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func oneFlow(dial func(string) (net.Conn, error), addr string, request, response int, buf []byte) error {
	conn, err := dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return exchange(conn, request, response, buf)
}

func quantileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

// openChecked connects and checks that the connection is relayed end to end (not only
// accepted by a proxy) with a 1-byte exchange.
func openChecked(addr string, buf []byte) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := exchange(conn, 1, 1, buf); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

type idleResult struct {
	Open       int     `json:"open"`
	Failed     int     `json:"failed"` // attempts that failed (each connection gets 3)
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
}

func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	targets := fs.String("targets", "", "host:port,... (round robin)")
	count := fs.Int("count", 1000, "connections to open and hold")
	parallel := fs.Int("parallel", 32, "connections opened at once")
	_ = fs.Parse(args)
	addrs := strings.Split(*targets, ",")
	if *targets == "" {
		return errors.New("idle needs -targets")
	}
	conns := make([]net.Conn, *count)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for {
				i := int(next.Add(1)) - 1
				if i >= *count {
					return
				}
				for attempt := 0; conns[i] == nil; attempt++ {
					conn, err := openChecked(addrs[i%len(addrs)], buf)
					if err == nil {
						conns[i] = conn
						break
					}
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("connection %d: %v", i, err))
					if attempt == 2 {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	result := idleResult{Open: *count, Failed: int(failed.Load()), Seconds: time.Since(start).Seconds()}
	for _, conn := range conns {
		if conn == nil {
			result.Open--
		}
	}
	if e, ok := firstErr.Load().(string); ok {
		result.FirstError = e
	}
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // hold until the caller closes stdin
	for _, conn := range conns {
		conn.Close()
	}
	return nil
}
