// Package rnisfeed consumes the RNIS adapter's per-UE measurements (AMQP exchange rnis,
// docs/development.md "The RNIS feed") for the UE addresses of the tunnel's paths, and
// hands each path its radio capacity and RLC queue. The broker is retried with capped
// backoff; "rnis_feed" in /healthz says whether it is consumed.
package rnisfeed

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

// Sink receives a UE's report: capacity (bit/s) and RLC queue (bytes).
type Sink func(ue netip.Addr, capacityBps float64, queueBytes int, at time.Time)

// measurement is the part of mec_common.bus.rnis.RnisMeasurement the tunnel reads.
type measurement struct {
	UE            netip.Addr `json:"ue_ipv4"`
	RapidBps      *float64   `json:"rapid_capacity_bps"`
	CQIBps        *float64   `json:"cqi_capacity_bps"`
	QueueBytes    *int       `json:"rlc_queue_bytes"`
	ObservedNs    int64      `json:"observed_ns"`
	SchemaVersion int        `json:"schema_version"`
}

// BindingKey is the routing key of UE ue's measurements.
func BindingKey(ue netip.Addr) string {
	return "rnis.v1.meas.*.*." + strings.ReplaceAll(ue.String(), ".", "_")
}

// Parse reads one message body; capacity is RAPID's C_i, else the CQI capacity.
func Parse(body []byte) (ue netip.Addr, capacityBps float64, queueBytes int, at time.Time, err error) {
	var m measurement
	if err := json.Unmarshal(body, &m); err != nil {
		return ue, 0, 0, at, err
	}
	if m.SchemaVersion != 1 || !m.UE.IsValid() {
		return ue, 0, 0, at, fmt.Errorf("not an RNIS v1 measurement of a UE")
	}
	switch {
	case m.RapidBps != nil:
		capacityBps = *m.RapidBps
	case m.CQIBps != nil:
		capacityBps = *m.CQIBps
	}
	if m.QueueBytes != nil {
		queueBytes = *m.QueueBytes
	}
	return m.UE, capacityBps, queueBytes, time.Unix(0, m.ObservedNs), nil
}

// Run consumes until ctx ends, reconnecting with backoff.
func Run(ctx context.Context, url, exchange string, ues []netip.Addr, sink Sink, health *svc.Health, log *slog.Logger) {
	svc.KeepRunning(ctx, health, "rnis_feed", "RNIS feed", log, func(ctx context.Context) error {
		return consume(ctx, url, exchange, ues, sink, health)
	})
}

func consume(ctx context.Context, url, exchange string, ues []netip.Addr, sink Sink, health *svc.Health) error {
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
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": 1000})
	if err != nil {
		return err
	}
	for _, ue := range ues {
		if err := ch.QueueBind(q.Name, BindingKey(ue), exchange, false, nil); err != nil {
			return err
		}
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return err
	}
	health.Set("rnis_feed", true, fmt.Sprintf("consuming %d UE(s) from exchange %s", len(ues), exchange), false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("broker closed the channel")
			}
			ue, capacity, queue, at, err := Parse(d.Body)
			if err != nil {
				continue // an unreadable message changes nothing
			}
			sink(ue, capacity, queue, at)
		}
	}
}
