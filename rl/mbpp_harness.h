// The trusted Python harness that runs first inside the MBPP sandbox (see mbpp_sandbox.h for the
// passing rule it implements).
#pragma once

namespace pulse::rl {

/// Python 3 source, run as `python3 -I -B -c SOURCE`. Protocol: reads one UTF-8 JSON object
/// {"nonce", "code", "setup", "tests": [assert lines]} from fd 3 until EOF and closes fd 3; writes
/// status lines to fd 4: "START" (harness ready, candidate about to run), then at most one of
/// "SYNTAX <exc>", "EARLY_EXIT", "RUNTIME <exc>", "FAIL <i> assert|not_plain_value", "ERROR <i> <exc>",
/// or finally "OK <nonce> <n_tests>". Exit status 0 only after the OK line.
const char* mbpp_harness_source();

}  // namespace pulse::rl
