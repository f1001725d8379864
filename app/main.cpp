// pulse: the single binary. Subcommands are wired in app/cli.cpp (see `pulse --help`).
#include "app/cli.h"

int main(int argc, char** argv) {
  return pulse::app::run_cli(argc, argv);
}
