// Command rnis-bench-consumer consumes the RNIS feed for the benchmark (make bench-rnis) and
// prints, as JSON, how many measurements arrived and how late: from the source's snapshot
// time (source_time_ns) and from the adapter's poll (observed_ns) to the consumer. It reads
// per-UE messages (rnis.v1.meas.*) and cell messages (rnis.v1.cell.*: one sample per UE).
// by_position_us tells where a poll's messages wait: the latency of the n-th message of the
// same poll (per-UE messages leave the adapter in one write, so a growth with n is queueing
// behind the earlier ones, in the broker or here).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/valyala/fastjson"
)

func main() {
	url := flag.String("amqp-url", "amqp://guest:guest@127.0.0.1:5672/%2F", "broker")
	exchange := flag.String("exchange", "rnis", "exchange of the feed")
	binding := flag.String("binding", "rnis.v1.meas.#", "binding key (rnis.v1.cell.# for cell messages)")
	duration := flag.Duration("duration", 10*time.Second, "how long to measure (after the first message)")
	warmup := flag.Duration("warmup", 2*time.Second, "messages in this first period are not counted")
	flag.Parse()
	conn, err := amqp.Dial(*url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := ch.ExchangeDeclare(*exchange, "topic", true, false, false, false, nil); err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(1_000_000)})
	if err == nil {
		err = ch.QueueBind(q.Name, *binding, *exchange, false, nil)
	}
	if err != nil {
		log.Fatal(err)
	}
	_ = ch.Qos(4096, 0, false)
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stderr, "consumer ready")
	var p fastjson.Parser
	var fromSource, fromAdapter []float64
	byPosition := map[int][]float64{} // n-th message of a poll → poll-to-consumer latencies
	var lastPoll int64
	position, messages := 0, 0
	perSecond := map[int64]int{}
	var start, end time.Time
	timeout := time.After(*duration + *warmup + 30*time.Second)
	for {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-timeout:
			log.Fatal("no end of measurement: too few messages")
		}
		now := time.Now()
		if start.IsZero() {
			start, end = now.Add(*warmup), now.Add(*warmup+*duration)
		}
		if now.After(end) {
			break
		}
		if now.Before(start) {
			continue
		}
		v, err := p.ParseBytes(d.Body)
		if err != nil {
			log.Fatalf("bad message: %v", err)
		}
		ues := 1 // measurements in this message
		if v.Exists("ues") {
			ues = len(v.GetArray("ues"))
		}
		messages++
		poll := v.GetInt64("observed_ns")
		if poll != lastPoll {
			lastPoll, position = poll, 0
		}
		position++
		src := v.GetInt64("source_time_ns")
		wait := float64(now.UnixNano()-poll) / 1e3
		for range ues {
			if src > 0 {
				fromSource = append(fromSource, float64(now.UnixNano()-src)/1e3)
			}
			fromAdapter = append(fromAdapter, wait)
		}
		if position <= 64 {
			byPosition[position] = append(byPosition[position], wait)
		}
		perSecond[int64(now.Sub(start)/time.Second)] += ues
	}
	seconds := make([]int, int(duration.Seconds()))
	for s, n := range perSecond {
		if int(s) < len(seconds) {
			seconds[s] = n
		}
	}
	positions := map[string]float64{} // position → median poll-to-consumer latency
	for n, v := range byPosition {
		positions[fmt.Sprint(n)] = summary(v)["p50"]
	}
	out := map[string]any{
		"measurements": len(fromAdapter), "messages": messages, "seconds": duration.Seconds(),
		"measurements_per_s":           float64(len(fromAdapter)) / duration.Seconds(),
		"messages_per_s":               float64(messages) / duration.Seconds(),
		"by_position_us":               positions,
		"per_second":                   seconds,
		"source_to_consumer_us":        summary(fromSource),
		"adapter_poll_to_consumer_us":  summary(fromAdapter),
		"source_to_consumer_sample_us": sample(fromSource, 20000),
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func summary(v []float64) map[string]float64 {
	if len(v) == 0 {
		return nil
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return map[string]float64{"p50": q(.5), "p90": q(.9), "p99": q(.99), "p999": q(.999), "max": s[len(s)-1]}
}

// sample keeps every k-th value so that the plot data stays small.
func sample(v []float64, n int) []float64 {
	if len(v) <= n {
		return v
	}
	out := make([]float64, 0, n)
	step := float64(len(v)) / float64(n)
	for i := 0.0; int(i) < len(v) && len(out) < n; i += step {
		out = append(out, v[int(i)])
	}
	return out
}
