package server

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	promptTokens *prometheus.CounterVec
	genTokens    *prometheus.CounterVec
	cacheHits    *prometheus.CounterVec
	ttft         *prometheus.HistogramVec
	itl          *prometheus.HistogramVec
	queueDepth   *prometheus.GaugeVec
	queueWait    *prometheus.HistogramVec
}

// modelMetrics are the children of the per-model metrics, looked up once.
type modelMetrics struct {
	promptTokens, genTokens, cacheHits prometheus.Counter
	ttft, itl                          prometheus.Observer
	queueDepth                         prometheus.Gauge
	queueWait                          prometheus.Observer
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lem_http_request_duration_seconds", Help: "Time to answer an HTTP request, to the end of its stream.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_prompt_tokens_total", Help: "Prompt tokens of admitted requests, reused ones included.",
		}, []string{"model"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_generated_tokens_total", Help: "Tokens generated.",
		}, []string{"model"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_prefix_cache_hit_tokens_total", Help: "Prompt tokens reused from the resident session instead of prefilled.",
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lem_time_to_first_token_seconds", Help: "Time from a request's arrival to its first generated token.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lem_inter_token_latency_seconds", Help: "Time between consecutive generated tokens.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"model"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lem_queue_depth", Help: "Requests waiting for their model.",
		}, []string{"model"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lem_queue_wait_seconds", Help: "Time a request waited for its model, from reaching the queue to its turn (or to giving up); requests refused at once are not counted.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 13),
		}, []string{"model"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.promptTokens, m.genTokens, m.cacheHits, m.ttft, m.itl, m.queueDepth, m.queueWait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) forModel(id string) modelMetrics {
	return modelMetrics{
		promptTokens: m.promptTokens.WithLabelValues(id),
		genTokens:    m.genTokens.WithLabelValues(id),
		cacheHits:    m.cacheHits.WithLabelValues(id),
		ttft:         m.ttft.WithLabelValues(id),
		itl:          m.itl.WithLabelValues(id),
		queueDepth:   m.queueDepth.WithLabelValues(id),
		queueWait:    m.queueWait.WithLabelValues(id),
	}
}

// observeRequest counts a finished HTTP request.
func (m *metrics) observeRequest(route string, code int, seconds float64) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(seconds)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
