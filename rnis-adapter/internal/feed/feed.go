// Package feed publishes the RNIS feed to a RabbitMQ topic exchange with publisher confirms.
//
// The poller must never wait for the broker: Publish hands messages to the connection
// without blocking on confirms (they are counted asynchronously), drops messages while the
// broker is away or too many are unconfirmed (measurements are only useful fresh), and a
// background loop reconnects with capped exponential backoff. Messages of one poll go out
// in one batch: the connection is corked so that the batch costs one write system call.
package feed

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Message is one AMQP message of the feed.
type Message struct {
	Key  string
	Body []byte
	Kind string // "meas" or "event": the "type" header
}

// Stats are the publisher's counters (monotonic) and state.
type Stats struct {
	Published, Confirmed, Nacked, Dropped atomic.Uint64
}

// Observer receives what the publisher sees; Metrics implements it.
type Observer interface {
	BrokerUp(up bool, detail string)
	Confirmed(latency time.Duration, ack bool)
	Dropped(reason string, n int)
	Published(n int)
}

// Config of a Publisher.
type Config struct {
	URL         string
	Exchange    string
	MaxInFlight int           // unconfirmed messages before new ones are dropped
	MaxLag      time.Duration // oldest unconfirmed message older than this: drop new ones
	MaxBackoff  time.Duration // reconnect backoff cap
}

// Publisher owns one connection and one confirm-mode channel.
type Publisher struct {
	cfg Config
	obs Observer
	log *slog.Logger

	mu        sync.Mutex // guards ch, conn, cork and the sent-time ring
	conn      *amqp.Connection
	ch        *amqp.Channel
	cork      *corkConn
	sentAt    []int64 // publish time by delivery tag (ring)
	nextTag   uint64
	confirmed uint64 // highest delivery tag confirmed (confirms arrive in order)
	inFlight  atomic.Int64
}

// New returns a publisher; call Run to connect.
func New(cfg Config, obs Observer, log *slog.Logger) *Publisher {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1 << 16
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = 200 * time.Millisecond
	}
	return &Publisher{cfg: cfg, obs: obs, log: log, sentAt: make([]int64, ringSize(cfg.MaxInFlight))}
}

func ringSize(n int) int {
	size := 1
	for size < 2*n {
		size <<= 1
	}
	return size
}

// Run connects and reconnects until ctx ends, then closes the connection.
func (p *Publisher) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		closed, err := p.connect()
		if err != nil {
			p.obs.BrokerUp(false, err.Error())
			p.log.Warn("broker unreachable", "err", err, "retry_in", backoff.String())
			if !sleep(ctx, jitter(backoff)) {
				break
			}
			backoff = min(2*backoff, p.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		p.obs.BrokerUp(true, "connected to "+redact(p.cfg.URL))
		p.log.Info("broker connected", "exchange", p.cfg.Exchange)
		select {
		case err := <-closed:
			p.drop()
			detail := "connection closed"
			if err != nil {
				detail = err.Error()
			}
			p.obs.BrokerUp(false, detail)
			p.log.Warn("broker connection lost", "err", detail)
		case <-ctx.Done():
		}
	}
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	p.drop()
	if conn != nil {
		_ = conn.Close()
	}
}

func (p *Publisher) connect() (<-chan *amqp.Error, error) {
	var cork *corkConn
	conn, err := amqp.DialConfig(p.cfg.URL, amqp.Config{
		Heartbeat: 5 * time.Second,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := amqp.DefaultDial(5*time.Second)(network, addr)
			if err != nil {
				return nil, err
			}
			cork = &corkConn{Conn: c}
			return cork, nil
		},
		Properties: amqp.Table{"connection_name": "rnis-adapter"},
	})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(p.cfg.Exchange, "topic", true, false, false, false, nil)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, p.cfg.MaxInFlight))
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	p.mu.Lock()
	p.conn, p.ch, p.cork, p.nextTag, p.confirmed = conn, ch, cork, 1, 0
	p.inFlight.Store(0)
	p.mu.Unlock()
	go p.countConfirms(confirms)
	return closed, nil
}

// drop forgets the connection (it is closed or closing).
func (p *Publisher) drop() {
	p.mu.Lock()
	p.ch, p.cork = nil, nil
	p.mu.Unlock()
}

func (p *Publisher) countConfirms(confirms <-chan amqp.Confirmation) {
	for c := range confirms {
		p.mu.Lock()
		sent := p.sentAt[c.DeliveryTag&uint64(len(p.sentAt)-1)]
		p.confirmed = max(p.confirmed, c.DeliveryTag)
		p.mu.Unlock()
		p.inFlight.Add(-1)
		p.obs.Confirmed(time.Duration(time.Now().UnixNano()-sent), c.Ack)
	}
}

var (
	errNotConnected = errors.New("broker not connected")
	errBehind       = errors.New("broker behind: batch dropped")
)

// Publish sends a batch (one poll's messages) without waiting for confirms. Messages that
// cannot go out now are dropped and counted.
func (p *Publisher) Publish(batch []Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.obs.Dropped("broker_down", len(batch))
		return errNotConnected
	}
	now := time.Now()
	if oldest := p.confirmed + 1; oldest < p.nextTag {
		if lag := now.UnixNano() - p.sentAt[oldest&uint64(len(p.sentAt)-1)]; lag > p.cfg.MaxLag.Nanoseconds() {
			// The broker is behind: what we would send now would arrive stale. Measurements
			// are only useful fresh, so skip this batch rather than queue it.
			p.obs.Dropped("backpressure", len(batch))
			return errBehind
		}
	}
	room := p.cfg.MaxInFlight - int(p.inFlight.Load())
	if room < len(batch) {
		p.obs.Dropped("backpressure", len(batch)-max(room, 0))
		batch = batch[:max(room, 0)]
	}
	p.cork.cork()
	defer func() {
		if err := p.cork.uncork(); err != nil {
			p.log.Warn("broker write failed", "err", err)
		}
	}()
	for i, m := range batch {
		err := p.ch.Publish(p.cfg.Exchange, m.Key, false, false, amqp.Publishing{
			ContentType: "application/json",
			Headers:     amqp.Table{"schema": int32(1), "type": m.Kind},
			Body:        m.Body,
		})
		if err != nil {
			p.obs.Dropped("broker_down", len(batch)-i)
			return err
		}
		p.sentAt[p.nextTag&uint64(len(p.sentAt)-1)] = now.UnixNano()
		p.nextTag++
		p.inFlight.Add(1)
	}
	p.obs.Published(len(batch))
	return nil
}

// corkConn buffers writes while corked, so that a batch of publishes leaves in one write.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func (c *corkConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		_ = c.Conn.Close() // the connection's reader sees it and reports the loss
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.2*rand.Float64()))
}

// redact removes the password from an AMQP URL for logs and health.
func redact(url string) string {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return "(invalid URL)"
	}
	u.Password = ""
	return u.String()
}
