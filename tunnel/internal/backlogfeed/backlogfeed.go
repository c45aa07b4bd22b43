// Package backlogfeed publishes what the tunnel holds toward its UE on AMQP, in the PEP's
// backlog schema (mec_common.bus.backlog: exchange topic, key pep.v1.backlog.<ue>, schema 2),
// so that the path manager's queue input is one contract whichever data plane carries the
// UE (docs/path-manager.md, "Queue"). As the PEP: a sample every interval while something
// is held, and one zero when it drains. The broker is retried with capped backoff;
// "backlog_feed" in /healthz says whether it is published.
package backlogfeed

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"mts.invalid/suite/services/common/go/svc"
)

// Sample is the tunnel's backlog toward the UE at one instant (bytes).
type Sample struct {
	Backlog  int    // ingress queue + in flight on the paths
	Unsent   int    // the ingress queue: not sent on any path yet
	Received uint64 // read from the TUN since start (cumulative: its growth is the arrival rate)
	Flows    int    // flows with packets in the ingress queue
}

// Source samples the tunnel.
type Source func() Sample

// message is mec_common.bus.backlog.PepBacklog as the wire has it.
type message struct {
	Schema   int    `json:"schema"`
	UE       string `json:"ue"`
	TsNs     int64  `json:"ts_ns"`
	Backlog  int    `json:"backlog_bytes"`
	Unsent   int    `json:"unsent_bytes"`
	Received uint64 `json:"received_bytes"`
	Flows    int    `json:"flows"`
}

// RoutingKey is the key of UE ue's messages.
func RoutingKey(ue netip.Addr) string {
	return "pep.v1.backlog." + strings.ReplaceAll(ue.String(), ".", "_")
}

// Body is one sample's message body.
func Body(ue netip.Addr, s Sample, at time.Time) []byte {
	b, _ := json.Marshal(message{Schema: 2, UE: ue.String(), TsNs: at.UnixNano(), Backlog: s.Backlog,
		Unsent: s.Unsent, Received: s.Received, Flows: s.Flows})
	return b
}

// Run publishes until ctx ends, reconnecting with backoff.
func Run(ctx context.Context, url, exchange string, ue netip.Addr, every time.Duration, src Source,
	health *svc.Health, log *slog.Logger) {
	svc.KeepRunning(ctx, health, "backlog_feed", "backlog feed", log, func(ctx context.Context) error {
		return publish(ctx, url, exchange, ue, every, src, health)
	})
}

func publish(ctx context.Context, url, exchange string, ue netip.Addr, every time.Duration, src Source,
	health *svc.Health) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return err
	}
	health.Set("backlog_feed", true, fmt.Sprintf("publishing %s to exchange %s every %v", RoutingKey(ue), exchange, every), false)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	key, held := RoutingKey(ue), true // one zero first, so a consumer starts from empty
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return fmt.Errorf("broker closed the connection: %v", e)
		case <-ticker.C:
		}
		s := src()
		if s.Backlog == 0 && !held {
			continue
		}
		held = s.Backlog > 0
		err := ch.PublishWithContext(ctx, exchange, key, false, false, amqp.Publishing{
			ContentType: "application/json", Headers: amqp.Table{"schema": int32(2)},
			Timestamp: time.Now(), Body: Body(ue, s, time.Now())})
		if err != nil {
			return err
		}
	}
}
