// The meaning of a worker's generate report, checked before it counts (a worker is a peer: its report is
// input). The control server (app/wire/control.h) refuses a report that fails with 422 naming the field and
// drops the worker; the rollout pipeline checks again what it assembles (reports kept in a checkpoint too).
#pragma once
#include <cstdint>

#include "app/wire/messages.h"

namespace pulse::app {

/// What a share's rollouts must respect.
struct ReportLimits {
  int64_t group_size = 0;  ///< rollouts per prompt (rl.group_size)
  int64_t vocab_size = 0;  ///< token ids in [0, vocab_size) (the model's embedding rows)
  int64_t max_tokens = 0;  ///< prompt + response tokens at most (the model's positions)
};

/// Checks a generate report for a share of `prompts` prompts: prompts x group_size rollouts, each with
/// problem_index = group = its prompt's position, non-empty prompt and response ids inside the vocabulary,
/// at most max_tokens in all, finite log-probs <= 0, a finite reward; `tokens` the number of response ids;
/// finite, non-negative timings; root_hash of 1..16 hex digits. Throws MessageError naming the field
/// ("field 'rollouts[3].response_ids[7]': token id 4294967301 outside the vocabulary [0, 312)").
/// Thread-safe (pure).
void check_share_report(const WorkerReport& report, int64_t prompts, const ReportLimits& limits);

}  // namespace pulse::app
