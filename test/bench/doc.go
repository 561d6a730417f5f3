// Package bench measures scheduler configurations against each other on a
// simulated vLLM fleet: by default in virtual time (the simulator's
// discrete-event loop drives the real scheduler and its plugins, so a
// minutes-long load ramp runs in seconds and is exactly repeatable for a
// seed), optionally over real HTTP.
//
// A run takes a workload (package test/workloads), a fleet (fleets/*.yaml
// or a file, see [Fleet]) and a list of EndpointPickerConfig files
// (configs/*.yaml or files). For every (configuration, load level) it
// records TTFT p50/p90/p99, TPOT p90, end-to-end p90, input and output
// tokens per second, goodput against the workload's SLOs, prefix-cache hit
// rate, requests per endpoint and saturation-release firings; per
// configuration it finds the knee (the highest load level whose knee
// metric stays within the bound) and the throughput ratio against the
// round-robin baseline at the knee. [Results] is written as results.json
// (schema in results.go) and rendered as a terminal table and a
// self-contained report.html.
package bench
