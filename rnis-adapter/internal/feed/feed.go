// Package feed publishes the RNIS feed to a RabbitMQ topic exchange with publisher confirms.
//
// The poller must never wait for the broker: Publish writes a poll's messages in one write
// without waiting for confirms (they are counted as they arrive), drops messages while the
// broker is away or behind (measurements are only useful fresh), and a background loop
// reconnects with capped exponential backoff.
package feed

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Kinds of message: the "type" header.
const (
	KindMeas  = "meas"  // one UE's measurement
	KindCell  = "cell"  // the measurements of one cell's UEs
	KindEvent = "event" // attach, detach, cell change
)

// Message is one AMQP message of the feed.
type Message struct {
	Key  string
	Body []byte
	Kind string // KindMeas, KindCell or KindEvent
}

// Observer receives what the publisher sees; obs.Metrics implements it.
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

// Publisher owns one connection with one confirm-mode channel.
type Publisher struct {
	cfg     Config
	obs     Observer
	log     *slog.Logger
	headers map[string][]byte // the headers table of each Kind

	mu        sync.Mutex // guards everything below
	w         *wire
	blocked   bool
	sentAt    []int64 // publish time by delivery tag (ring)
	nextTag   uint64  // tag of the next message (tags start at 1 per channel)
	confirmed uint64  // every tag up to this one is confirmed
	inFlight  int
}

// New returns a publisher; call Run to connect.
func New(cfg Config, obs Observer, log *slog.Logger) *Publisher {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = 200 * time.Millisecond
	}
	size := 1
	for size < 2*cfg.MaxInFlight {
		size <<= 1
	}
	p := &Publisher{cfg: cfg, obs: obs, log: log, sentAt: make([]int64, size),
		headers: map[string][]byte{}}
	for _, kind := range []string{KindMeas, KindCell, KindEvent} {
		p.headers[kind] = messageHeaders(1, kind)
	}
	return p
}

// Run connects and reconnects until ctx ends, then closes the connection.
func (p *Publisher) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		w, err := dialWire(p.cfg.URL, p.cfg.Exchange, 5*time.Second)
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
		p.mu.Lock()
		p.w, p.blocked, p.nextTag, p.confirmed, p.inFlight = w, false, 1, 0, 0
		p.mu.Unlock()
		p.obs.BrokerUp(true, "connected to "+redact(p.cfg.URL))
		p.log.Info("broker connected", "exchange", p.cfg.Exchange)
		lost := make(chan error, 1)
		go func() { lost <- w.acks(p.onAck, p.onBlocked) }()
		select {
		case err := <-lost:
			p.drop(w)
			p.obs.BrokerUp(false, err.Error())
			p.log.Warn("broker connection lost", "err", err)
		case <-ctx.Done():
			p.drop(w)
			w.close()
		}
	}
}

// drop forgets the connection (it is closed or closing).
func (p *Publisher) drop(w *wire) {
	p.mu.Lock()
	if p.w == w {
		p.w = nil
	}
	p.mu.Unlock()
	_ = w.conn.Close()
}

// onAck counts the broker's confirms (multiple = every tag up to this one).
func (p *Publisher) onAck(tag uint64, multiple, ack bool) {
	now := time.Now().UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	first := tag
	if multiple {
		first = p.confirmed + 1
	}
	for t := first; t <= tag && t < p.nextTag; t++ {
		p.obs.Confirmed(time.Duration(now-p.sentAt[t&uint64(len(p.sentAt)-1)]), ack)
		p.inFlight--
	}
	p.confirmed = max(p.confirmed, tag)
	// Acks may come out of order across queues: never count more outstanding messages than
	// were sent after the highest confirmed one (a drifting count would drop everything).
	p.inFlight = max(0, min(p.inFlight, int(p.nextTag-1-p.confirmed)))
}

func (p *Publisher) onBlocked(blocked bool) {
	p.mu.Lock()
	p.blocked = blocked
	p.mu.Unlock()
	if blocked {
		p.log.Warn("broker blocked publishing (resource alarm)")
	}
}

var (
	errNotConnected = errors.New("broker not connected")
	errBehind       = errors.New("broker behind: batch dropped")
)

// Publish sends a batch (one poll's messages) in one write, without waiting for confirms.
// Messages that cannot go out now are dropped and counted.
func (p *Publisher) Publish(batch []Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w == nil {
		p.obs.Dropped("broker_down", len(batch))
		return errNotConnected
	}
	now := time.Now()
	if p.behind(now) {
		// What we would send now would arrive stale: skip it rather than queue it.
		p.obs.Dropped("backpressure", len(batch))
		return errBehind
	}
	if room := p.cfg.MaxInFlight - p.inFlight; room < len(batch) {
		p.obs.Dropped("backpressure", len(batch)-max(room, 0))
		batch = batch[:max(room, 0)]
	}
	for _, m := range batch {
		p.w.publish(p.cfg.Exchange, m.Key, p.headers[m.Kind], m.Body)
		p.sentAt[p.nextTag&uint64(len(p.sentAt)-1)] = now.UnixNano()
		p.nextTag++
		p.inFlight++
	}
	_ = p.w.conn.SetWriteDeadline(now.Add(2 * time.Second))
	if err := p.w.flush(); err != nil {
		p.obs.Dropped("broker_down", len(batch))
		_ = p.w.conn.Close() // the reader sees it and Run reconnects
		return err
	}
	p.obs.Published(len(batch))
	return nil
}

// behind: the broker blocked us, or the oldest unconfirmed message is older than MaxLag.
func (p *Publisher) behind(now time.Time) bool {
	if p.blocked {
		return true
	}
	oldest := p.confirmed + 1
	return oldest < p.nextTag &&
		now.UnixNano()-p.sentAt[oldest&uint64(len(p.sentAt)-1)] > p.cfg.MaxLag.Nanoseconds()
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
