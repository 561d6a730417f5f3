// Package workloads loads benchmark workload specs and turns them into
// deterministic request plans.
//
// A workload spec is a YAML file (see the shipped *.yaml files next to this
// package, embedded in the binary). A spec describes a corpus of
// conversations and how load is offered; [Spec.Plan] expands it, for a
// given seed, into one [Level] per load level: the exact sessions to play,
// their arrival times (open loop) or their queue order (closed loop), and
// the token content of every turn. The same spec and seed always give the
// same plan, byte for byte.
//
// # Format
//
//	name: b2b-saas                  # required; [a-z0-9-]
//	description: free text
//	seed: 7                         # default seed (bench --seed overrides)
//	model: Qwen/Qwen3-32B           # model name sent in requests
//	systemPrompts:                  # shared prefixes
//	  count: 150                    # 0 = every conversation has its own
//	  tokens: {min: 6000, max: 6000}
//	conversations:
//	  count: 750                    # corpus size; 0 = perConcurrency × level
//	  perConcurrency: 1             # (closed loop) or sessions (open loop)
//	  turns: {value: 1}
//	  inputTokens: {value: 1200}    # new user tokens per turn
//	  outputTokens: {value: 1000}   # tokens the engine generates per turn
//	  maxTokens: 32000              # client cap (max_tokens); 0 = none
//	  maxContextTokens: 128000      # end a conversation before it overflows
//	  images:                       # optional, per turn
//	    count: {min: 1, max: 4}
//	    pool: 200                   # distinct images (reuse → encoder cache hits)
//	    sizes: [{width: 1280, height: 720, weight: 2}, {width: 448, height: 448}]
//	sampling: random                # random: sessions draw conversations
//	                                #   uniformly with replacement
//	                                # sequential: each conversation `repeat`
//	                                #   times, shuffled
//	repeat: 1
//	classes:                        # optional SLO classes; override the
//	  - {name: chat, weight: 3, inputTokens: {...}, outputTokens: {...},
//	     slo: {ttftMs: 2000, tpotMs: 50}}
//	arrival:
//	  mode: poisson                 # poisson | bursty (open loop: sessions
//	                                #   per second) | closed (concurrency)
//	  levels: [3, 10, 20, 40, 60]
//	  durationSeconds: 120          # open loop: sessions = level × duration
//	  ramp: true                    # levels back to back on one warm fleet
//	  burst: {factor: 4, periodSeconds: 20, dutyCycle: 0.2}   # bursty only
//	slo: {ttftMs: 10000, tpotMs: 100}   # goodput: requests meeting both
//	knee: {metric: ttft_p90, boundMs: 10000}   # ttft_p90 | tpot_p90 | e2e_p90
//	fleet: b2b-saas                  # default fleet name for `spillway bench`
//
// A distribution (tokens, turns, counts) is one of: {value: N} (fixed);
// {min, max} (uniform integer); {min, max, mean} (shifted exponential with
// the given mean, truncated to [min, max]). Unknown fields are errors.
//
// Token content: every prompt is a list of [Segment]s, each a (key, length)
// pair whose token ids are a pure function of the key. Shared system
// prompts have keys derived from the workload seed and the prompt index,
// so two requests that share a system prompt share its token ids (and
// therefore its KV-cache blocks); a conversation's later turns repeat the
// earlier turns' segments, including the previous outputs, so context
// grows and stays cacheable.
package workloads
