// pulse: the single binary. Subcommands are wired in app/cli.cpp (see `pulse --help`).
#include <cstdio>

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::puts("pulse: no subcommands yet");
  return 1;
}
