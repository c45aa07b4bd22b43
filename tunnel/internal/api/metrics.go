package api

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mts.invalid/suite/tunnel/internal/engine"
)

// collector reads the engine's state at scrape time (nothing on the packet path).
type collector struct{ eng *engine.Engine }

var (
	descPathGauges = map[string]*prometheus.Desc{}
	descPathCounts = map[string]*prometheus.Desc{}
	descDrops      = prometheus.NewDesc("tunnel_dropped_total", "Datagrams and packets dropped, by reason", []string{"reason"}, nil)
	descQueueBytes = prometheus.NewDesc("tunnel_queue_bytes", "Bytes in the ingress queue", nil, nil)
	descQueueFlows = prometheus.NewDesc("tunnel_queue_active_flows", "Active flow queues of the ingress FQ-CoDel", nil, nil)
	descSojourn    = prometheus.NewDesc("tunnel_queue_sojourn_seconds", "Age of the oldest packet in the ingress queue", nil, nil)
	descRx         = prometheus.NewDesc("tunnel_rx_packets_total", "Inner packets received from the peer", nil, nil)
	descTx         = prometheus.NewDesc("tunnel_tx_datagrams_total", "Data datagrams sent", nil, nil)
	descReordered  = prometheus.NewDesc("tunnel_reorder_total", "Egress reorder buffer outcomes", []string{"outcome"}, nil)
)

func init() {
	for name, help := range map[string]string{"up": "1 when the path answers", "enabled": "1 when the scheduler may use the path",
		"cwnd_bytes": "Congestion window", "inflight_bytes": "Bytes in flight", "srtt_seconds": "Smoothed RTT"} {
		descPathGauges[name] = prometheus.NewDesc("tunnel_path_"+name, help, []string{"path"}, nil)
	}
	for name, help := range map[string]string{"sent_bytes": "Bytes sent", "sent_packets": "Datagrams sent",
		"lost_packets": "Datagrams declared lost", "timeouts": "Retransmission timeouts"} {
		descPathCounts[name] = prometheus.NewDesc("tunnel_path_"+name+"_total", help, []string{"path"}, nil)
	}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descPathGauges {
		ch <- d
	}
	for _, d := range descPathCounts {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descDrops, descQueueBytes, descQueueFlows, descSojourn, descRx, descTx, descReordered} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, p := range c.eng.Paths() {
		id := strconv.Itoa(int(p.ID))
		gauge := func(name string, v float64) {
			ch <- prometheus.MustNewConstMetric(descPathGauges[name], prometheus.GaugeValue, v, id)
		}
		count := func(name string, v uint64) {
			ch <- prometheus.MustNewConstMetric(descPathCounts[name], prometheus.CounterValue, float64(v), id)
		}
		gauge("up", b2f(p.Up))
		gauge("enabled", b2f(p.Enabled))
		gauge("cwnd_bytes", float64(p.CwndBytes))
		gauge("inflight_bytes", float64(p.InflightB))
		gauge("srtt_seconds", p.SRTTms/1e3)
		count("sent_bytes", p.SentBytes)
		count("sent_packets", p.SentPackets)
		count("lost_packets", p.LostPackets)
		count("timeouts", p.Timeouts)
	}
	st := c.eng.Stats()
	for reason, n := range st.Drops {
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(n), reason)
	}
	q := c.eng.Queue()
	ch <- prometheus.MustNewConstMetric(descQueueBytes, prometheus.GaugeValue, float64(q.Bytes))
	ch <- prometheus.MustNewConstMetric(descQueueFlows, prometheus.GaugeValue, float64(len(q.Flows)))
	ch <- prometheus.MustNewConstMetric(descSojourn, prometheus.GaugeValue, q.SojournMs/1e3)
	ch <- prometheus.MustNewConstMetric(descRx, prometheus.CounterValue, float64(st.RxPackets))
	ch <- prometheus.MustNewConstMetric(descTx, prometheus.CounterValue, float64(st.TxPackets))
	for outcome, n := range map[string]uint64{"in_order": st.Reorder.InOrder, "reordered": st.Reorder.Reordered,
		"late": st.Reorder.Late, "skipped": st.Reorder.Skipped, "unordered": st.Reorder.Unordered} {
		ch <- prometheus.MustNewConstMetric(descReordered, prometheus.CounterValue, float64(n), outcome)
	}
}

// Metrics serves /metrics: the engine's state plus Go and process metrics.
func Metrics(eng *engine.Engine) http.Handler {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collector{eng})
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{})
}
