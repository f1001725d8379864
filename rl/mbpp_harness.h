// The two Python programs of an MBPP grade (see mbpp_sandbox.h for the threat model and the passing
// rule): the trusted judge (rl/mbpp_judge.py, with the wire format of values) and the candidate-side
// server (rl/mbpp_candidate.py). Compiled into the binary as text (cmake/embed_text.cmake) so that it
// needs no data files.
#pragma once

namespace pulse::rl {

/// The judge, run as `python3 -I -B -S -c SOURCE` in its own sandbox, never in the candidate's.
/// fd 3: one UTF-8 JSON object {"nonce", "code", "setup", "tests": [assert lines]} from pulse, read to
/// EOF. fd 4: status lines to pulse: "JUDGE" (running), "START" (the candidate's program and setup
/// ran), then exactly one of "NOSTART" (the candidate's interpreter never answered: infrastructure),
/// "SYNTAX <exc>", "EARLY_EXIT", "RUNTIME <exc>" (the program or setup raised), "FAIL <i> assert",
/// "FAIL <i> not_plain_value", "FAIL <i> protocol", "ERROR <i> <exc>", "GONE <i>" (the candidate
/// process ended while the judge waited on it; i = -1 before the asserts), or finally
/// "OK <nonce> <n_tests>"; exit status 0 only after the OK line. fd 5 / fd 6: requests to / answers
/// from the candidate server, one JSON object per line. The judge parses each assert with `ast` and
/// evaluates it itself; names of the candidate's program become remote references whose calls,
/// attribute reads and iteration are requests over fd 5/6 with plain-data arguments and results.
const char* mbpp_judge_source();

/// The candidate-side server, run as `python3 -I -B -c SOURCE` inside the candidate's sandbox. fd 3:
/// requests from the judge, fd 4: answers (one JSON object per line). First it sends {"hello": 1},
/// then reads {"code", "setup"}, runs both in a fresh module namespace and answers {"ready": 1} (or
/// {"syntax": exc}, {"raise": exc}, {"exit": 1}), then serves requests until EOF. Everything here is
/// in the candidate's reach and therefore untrusted: the judge treats every answer as adversarial.
const char* mbpp_candidate_source();

}  // namespace pulse::rl
