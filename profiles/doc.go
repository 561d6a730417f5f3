// Package profiles is spillway's scheduling framework.
//
// A request is parsed once from its OpenAI-compatible body into a [Request].
// Data producers ([Producer]) annotate it (token counts, prefix matches) and
// book state through the lifecycle hooks ([DispatchHook], [FirstChunkHook],
// [PrefillDoneHook], [FinishHook], [FailHook]). A [ProfileHandler] then runs
// one or more scheduling profiles; each profile narrows the candidate
// endpoints with [Filter]s, sums weighted [Scorer] scores and lets a [Picker]
// choose. The handler's [Result] names the destination (primary profile's
// pick) and any routing headers.
//
// Plugins are built from an llm-d compatible EndpointPickerConfig file by
// [LoadConfigFile] using factories registered with [Register]. Endpoints are
// read-only views ([Endpoint]) shared between requests; plugins never copy or
// mutate them.
package profiles
