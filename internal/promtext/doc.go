// Package promtext is berth's Prometheus instrumentation: counters,
// histograms, gauges and summaries, gathered into metric families and
// served at /v1/metrics in the exposition formats a scraper negotiates
// (Handler). It does what berth used of client_golang, with the same
// output: the same families, series, values, ordering, content negotiation
// and compression (TestHandlerServesWhatClientGolangServed holds it to
// client_golang's answer for the same observations).
//
// Why not client_golang: its package set-up registers a default registry
// with a Go collector (a description per runtime/metrics series) and a
// process collector (procfs, whose package-level regexps it compiles), so
// every berth process paid ~0.7 ms of start-up for collectors berth never
// serves (issue 26: `berth version` is one binary with the agent). The
// encoding is prometheus/common's expfmt and the quantile streams are
// beorn7/perks', as client_golang's are; neither sets anything up at start.
//
// Sink turns go-metrics' calls (raft's) into gauges, counters and summaries
// as go-metrics' Prometheus sink did: names flattened with '_', summaries of
// the last 10 s with the 0.5, 0.9 and 0.99 quantiles, and every series
// kept for the life of the process (berth made that sink with Expiration 0,
// which never expires a series), so a rare counter stays monotonic.
package promtext
