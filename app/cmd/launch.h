// `pulse launch`: N local trainer processes the way `torchrun --nproc-per-node N` starts them.
//
//   pulse launch --nproc N [--nnodes M --node-rank K] [--master-addr A] [--master-port P] [--grace S]
//                CONFIG [--set k=v ...] [--resume DIR]      each child runs `pulse run CONFIG ...`
//   pulse launch --nproc N [...] -- ARGS...                   each child runs `pulse ARGS...`
//   pulse launch --nproc N [...] --no-pulse -- PROGRAM ARGS...  each child runs PROGRAM (PATH lookup)
//
// Children are this same executable (/proc/self/exe) with the torchrun environment set: RANK
// (= node_rank * nproc + local rank), LOCAL_RANK, WORLD_SIZE (= nnodes * nproc), LOCAL_WORLD_SIZE,
// GROUP_RANK (= node_rank), MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default: a free port on
// MASTER_ADDR, single node only), and OMP_NUM_THREADS=1 when nproc > 1 and it is not set (as torchrun).
// Their stdout/stderr are the launcher's, unprefixed (progress bars and JSON lines stay intact); the
// launcher's own lines on stderr start with "pulse launch:".
//
// Supervision: every rank runs in its own process group (so Ctrl-C at a terminal reaches the launcher
// only, once, and a signal to a rank reaches the processes it started). SIGINT/SIGTERM sent to the
// launcher are forwarded to every running rank and stop the launch. When a child
// exits non-zero or is killed by a signal, the launcher names the rank and how it ended, sends SIGTERM to
// the others and SIGKILL to any still running after the grace period. Exit code: 0 when every child
// exited 0; otherwise the first failed child's exit code (128 + signal when it was killed), or
// 128 + signal when the launcher itself was signalled.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pulse::app {

struct LaunchOptions {
  int nproc = 1;                          ///< processes on this node (>= 1)
  int nnodes = 1;                         ///< nodes in the job (>= 1)
  int node_rank = 0;                      ///< this node, 0..nnodes-1
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR for the children
  int master_port = 0;                    ///< MASTER_PORT; 0 = a free port (single node only)
  double grace_s = 10;                    ///< seconds between SIGTERM and SIGKILL when stopping children
  bool no_pulse = false;                  ///< args[0] is a program to run, not a pulse subcommand
  std::vector<std::string> args;          ///< the children's arguments after `pulse` (or the program)
};

/// Starts and supervises the children (see the file comment). Returns the launcher's exit code. Throws
/// std::invalid_argument for bad options and std::runtime_error when no child could be started.
int launch(const LaunchOptions& options);

/// Registers `pulse launch`. argv is the process's command line: the generic form is recognised by the
/// `--` separator after `launch`, which CLI11 does not report.
void register_launch_command(CLI::App& root, int argc, char** argv);

}  // namespace pulse::app
