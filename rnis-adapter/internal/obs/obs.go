// Package obs holds the adapter's Prometheus metrics (health is svc.Health). It implements the
// observer interfaces of the poller and the feed publisher.
package obs

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mts.invalid/suite/services/common/go/svc"
)

// Metrics are the adapter's Prometheus metrics.
type Metrics struct {
	health   *svc.Health
	registry *prometheus.Registry

	pollLatency    prometheus.Histogram
	pollBytes      prometheus.Counter
	polls          prometheus.Counter
	pollFailures   *prometheus.CounterVec
	parseErrors    *prometheus.CounterVec
	uesSeen        prometheus.Gauge
	measurements   prometheus.Counter
	repeats        prometheus.Counter
	events         *prometheus.CounterVec
	published      prometheus.Counter
	publishLatency prometheus.Histogram
	nacks          prometheus.Counter
	dropped        *prometheus.CounterVec
	brokerUp       prometheus.Gauge
	sourceUp       prometheus.Gauge
	notifications  *prometheus.CounterVec
	reportSets     prometheus.Counter
	reportPeriod   *prometheus.GaugeVec
	tti            *prometheus.GaugeVec
}

// NewMetrics registers the metrics in a registry of their own (plus Go and process metrics).
func NewMetrics(health *svc.Health) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	latency := []float64{.0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5, 1}
	m := &Metrics{health: health, registry: r,
		pollLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rnis_poll_latency_seconds",
			Help: "Time from the statistics request to the end of the response", Buckets: latency}),
		pollBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_poll_bytes_total", Help: "Bytes of statistics read"}),
		polls:     prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_polls_total", Help: "Successful polls of the RAN source"}),
		pollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rnis_poll_failures_total",
			Help: "Failed polls by reason (unreachable, http_status, read, parse)"}, []string{"reason"}),
		parseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rnis_parse_errors_total",
			Help: "Unreadable parts of statistics documents (bad_ue: one UE entry skipped)"}, []string{"reason"}),
		uesSeen:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "rnis_ues", Help: "UEs known now"}),
		measurements: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_measurements_total", Help: "UE measurements built"}),
		repeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_repeats_skipped_total",
			Help: "Measurements not published because the controller had not refreshed them (same frame, same values)"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rnis_events_total",
			Help: "UE events detected"}, []string{"kind"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_amqp_published_total", Help: "AMQP messages published"}),
		publishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rnis_amqp_confirm_latency_seconds",
			Help: "Time from publish to the broker's confirm", Buckets: latency}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_amqp_nacks_total", Help: "Messages the broker refused (nack)"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rnis_amqp_dropped_total",
			Help: "Messages not published (broker_down, backpressure)"}, []string{"reason"}),
		brokerUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rnis_broker_up", Help: "1 when connected to the broker"}),
		sourceUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rnis_ran_source_up", Help: "1 when the last poll succeeded"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rnis_mec012_notifications_total",
			Help: "MEC 012 notifications by type and result (sent, failed)"}, []string{"type", "result"}),
		reportSets: prometheus.NewCounter(prometheus.CounterOpts{Name: "rnis_report_period_set_total",
			Help: "Times the controller's reporting period was (re)applied (RNIS_REPORT_SF)"}),
		reportPeriod: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rnis_report_period_seconds",
			Help: "Time between two new reports (sfnSn) of a base station, measured"}, []string{"bs_id"}),
		tti: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rnis_tti_seconds",
			Help: "TTI length measured from a base station's sfnSn progression"}, []string{"bs_id"}),
	}
	for _, c := range []prometheus.Collector{m.pollLatency, m.pollBytes, m.polls, m.pollFailures, m.parseErrors,
		m.uesSeen, m.measurements, m.repeats, m.events, m.published, m.publishLatency, m.nacks, m.dropped,
		m.brokerUp, m.sourceUp, m.notifications, m.reportSets, m.reportPeriod, m.tti} {
		f(c)
	}
	// Show every series from the start, at zero.
	m.parseErrors.WithLabelValues("bad_ue")
	for _, r := range []string{"unreachable", "http_status", "read", "parse"} {
		m.pollFailures.WithLabelValues(r)
	}
	for _, r := range []string{"broker_down", "backpressure"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// SourceUp implements poller.Observer.
func (m *Metrics) SourceUp(up bool, detail string) {
	m.sourceUp.Set(b2f(up))
	m.health.Set("ran_source", up, detail, true)
}

// ReportPeriodSet implements poller.Observer.
func (m *Metrics) ReportPeriodSet(int64) { m.reportSets.Inc() }

// ReportPeriod implements poller.Observer.
func (m *Metrics) ReportPeriod(bsID int64, period, tti time.Duration) {
	id := strconv.FormatInt(bsID, 10)
	m.reportPeriod.WithLabelValues(id).Set(period.Seconds())
	m.tti.WithLabelValues(id).Set(tti.Seconds())
}

// Polled implements poller.Observer.
func (m *Metrics) Polled(latency time.Duration, n int) {
	m.polls.Inc()
	m.pollBytes.Add(float64(n))
	m.pollLatency.Observe(latency.Seconds())
}

// PollFailed implements poller.Observer.
func (m *Metrics) PollFailed(reason string) { m.pollFailures.WithLabelValues(reason).Inc() }

// Skipped implements poller.Observer.
func (m *Metrics) Skipped(reason string) { m.parseErrors.WithLabelValues(reason).Inc() }

// BrokerUp implements feed.Observer.
func (m *Metrics) BrokerUp(up bool, detail string) {
	m.brokerUp.Set(b2f(up))
	m.health.Set("broker", up, detail, true)
}

// Confirmed implements feed.Observer.
func (m *Metrics) Confirmed(latency time.Duration, ack bool) {
	m.publishLatency.Observe(latency.Seconds())
	if !ack {
		m.nacks.Inc()
	}
}

// Dropped implements feed.Observer.
func (m *Metrics) Dropped(reason string, n int) { m.dropped.WithLabelValues(reason).Add(float64(n)) }

// Published implements feed.Observer.
func (m *Metrics) Published(n int) { m.published.Add(float64(n)) }

// Poll records one poll's outcome after the tracker has seen it.
func (m *Metrics) Poll(measurements, repeats, ues int, events map[string]int) {
	m.measurements.Add(float64(measurements))
	m.repeats.Add(float64(repeats))
	m.uesSeen.Set(float64(ues))
	for kind, n := range events {
		m.events.WithLabelValues(kind).Add(float64(n))
	}
}

// Notified counts one MEC 012 notification.
func (m *Metrics) Notified(kind string, ok bool) {
	result := "sent"
	if !ok {
		result = "failed"
	}
	m.notifications.WithLabelValues(kind, result).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
