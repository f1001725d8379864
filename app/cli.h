// The `pulse` command line (CLI11): run, trainer, worker, eval, config, report, plus the sync, reward and
// bench subcommands that other areas register (app/cmd/commands.h).
#pragma once

namespace pulse::app {

/// Parses argv and runs the chosen subcommand. Errors print one message to stderr and return non-zero
/// (2 for usage errors, 1 for failures, or the code of a thrown pulse::app::Exit).
int run_cli(int argc, char** argv);

}  // namespace pulse::app
