package server

import (
	"net/http"
	"strconv"

	"github.com/lem-engine/lem/engine"

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
	ttft         *prometheus.HistogramVec
	itl          *prometheus.HistogramVec
	queueDepth   *prometheus.GaugeVec
	queueWait    *prometheus.HistogramVec
	embedInputs  *prometheus.CounterVec
	embedTokens  *prometheus.CounterVec
	// The welfare guard's user turns scored, and triggers by decision
	// and mediation outcome.
	welfareScored   prometheus.Counter
	welfareTriggers *prometheus.CounterVec
}

// modelMetrics are the children of the per-model metrics, looked up once.
type modelMetrics struct {
	promptTokens, genTokens  prometheus.Counter
	ttft, itl                prometheus.Observer
	queueDepth               prometheus.Gauge
	queueWait                prometheus.Observer
	embedInputs, embedTokens prometheus.Counter
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
		embedInputs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_embedding_inputs_total", Help: "Inputs embedded or scored by embedding and rerank requests.",
		}, []string{"model"}),
		embedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lem_embedding_tokens_total", Help: "Tokens of the inputs of embedding and rerank requests.",
		}, []string{"model"}),
	}
	m.welfareScored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lem_welfare_turns_scored_total", Help: "User turns the welfare guard scored (only with the guard on).",
	})
	m.welfareTriggers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lem_welfare_triggers_total", Help: "User turns that triggered the welfare guard, by decision (proceed, rephrase, pause) and mediation outcome (ok, unparseable, failed).",
	}, []string{"decision", "mediation"})
	m.reg.MustRegister(m.welfareScored, m.welfareTriggers, m.requests, m.duration, m.promptTokens, m.genTokens, m.ttft, m.itl, m.queueDepth, m.queueWait, m.embedInputs, m.embedTokens,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) forModel(id string) modelMetrics {
	return modelMetrics{
		promptTokens: m.promptTokens.WithLabelValues(id),
		genTokens:    m.genTokens.WithLabelValues(id),
		ttft:         m.ttft.WithLabelValues(id),
		itl:          m.itl.WithLabelValues(id),
		queueDepth:   m.queueDepth.WithLabelValues(id),
		queueWait:    m.queueWait.WithLabelValues(id),
		embedInputs:  m.embedInputs.WithLabelValues(id),
		embedTokens:  m.embedTokens.WithLabelValues(id),
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

// schedulerMetrics reports the state of the models' schedulers, read
// (engine.Scheduler.Stats) when /metrics is scraped.
type schedulerMetrics struct {
	models []*Model
	// list, when set, returns the models instead (a registry's loaded
	// ones, which come and go).
	list                                    func() []*Model
	running, waiting, parallel, used, total *prometheus.Desc
	cacheHits, seqPromptTokens, preemptions *prometheus.Desc
	drafted, accepted, restored             *prometheus.Desc
}

func newSchedulerMetrics(models []*Model) *schedulerMetrics {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"model"}, nil)
	}
	return &schedulerMetrics{
		models:   models,
		running:  desc("lem_sequences_running", "Sequences in the model's running batch."),
		waiting:  desc("lem_sequences_waiting", "Sequences of admitted requests waiting for room in the batch (requests waiting to be admitted are lem_queue_depth)."),
		parallel: desc("lem_sequences_parallel", "Most sequences the model runs at once."),
		used:     desc("lem_kv_blocks_used", "Blocks of the paged KV cache held by running sequences."),
		total:    desc("lem_kv_blocks_total", "Blocks of the paged KV cache."),
		cacheHits: desc("lem_prefix_cache_hit_tokens_total",
			"Prompt tokens of sequences served from the prefix cache instead of prefilled."),
		seqPromptTokens: desc("lem_sequence_prompt_tokens_total",
			"Prompt tokens of the sequences the scheduler ran (each choice of a request, and each prompt scored), cached ones included."),
		preemptions: desc("lem_preemptions_total", "Sequences set back to wait for want of KV cache blocks, to resume later."),
		drafted:     desc("lem_draft_tokens_total", "Draft tokens run with the token before them (speculative decoding by prompt lookup, --draft)."),
		accepted:    desc("lem_draft_accepted_tokens_total", "Draft tokens the sequences accepted, each a decode step saved."),
		restored:    desc("lem_preemptions_restored_total", "Preempted sequences resumed from their KV blocks copied to host memory, instead of recomputed."),
	}
}

// Describe implements prometheus.Collector.
func (c *schedulerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.parallel, c.used, c.total, c.cacheHits, c.seqPromptTokens, c.preemptions, c.drafted, c.accepted, c.restored} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *schedulerMetrics) Collect(ch chan<- prometheus.Metric) {
	models := c.models
	if c.list != nil {
		models = c.list()
	}
	for _, m := range models {
		if m.sched == nil {
			continue
		}
		st := m.sched.Stats()
		c.collect(ch, m.id, st)
	}
}

func (c *schedulerMetrics) collect(ch chan<- prometheus.Metric, id string, st engine.SchedulerStats) {
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), id)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), id)
	}
	gauge(c.running, st.Running)
	gauge(c.waiting, st.Waiting)
	gauge(c.parallel, st.Parallel)
	gauge(c.used, st.BlocksUsed)
	gauge(c.total, st.BlocksTotal)
	counter(c.cacheHits, st.CachedTokens)
	counter(c.seqPromptTokens, st.PromptTokens)
	counter(c.preemptions, st.Preemptions)
	counter(c.drafted, st.DraftTokens)
	counter(c.accepted, st.DraftAccepted)
	counter(c.restored, st.Restored)
}
