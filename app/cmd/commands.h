// Each area wires its own subcommands into the one CLI11 app (app/cli.cpp calls these).
#pragma once

namespace CLI {
class App;
}

namespace pulse::app {

/// `pulse sync diff|apply|inspect|verify|bench` (app/cmd/cmd_sync.cpp).
void register_sync_commands(CLI::App& root);

/// `pulse bench model` (app/cmd/cmd_model.cpp); `bench` is the parent subcommand.
void register_model_bench(CLI::App& bench);

/// `pulse bench loco` (app/cmd/cmd_bench_loco.cpp): ddp vs diloco vs pulseloco with `pulse launch`.
void register_loco_bench(CLI::App& bench);

/// `pulse bench generate` (app/cmd/cmd_bench_generate.cpp): model::generate() tokens/s per decode path on
/// a random-init model of an HF config.json (bench/generate_bench.h).
void register_generate_bench(CLI::App& bench);

/// `pulse bench wan` (app/cmd/cmd_bench_wan.cpp): the modes over emulated slow links (bench/wan_bench.h).
void register_wan_bench(CLI::App& bench);

/// `pulse reward math|mbpp` (app/cmd/cmd_reward.cpp).
void register_reward_commands(CLI::App& root);

/// `pulse generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) ...` (app/cmd/cmd_generate.cpp).
void register_generate_command(CLI::App& root);

/// `pulse data fetch|list` (app/cmd/cmd_data.cpp): the public datasets, verified and installed.
void register_data_commands(CLI::App& root);

/// Exit code a subcommand's callback asks for; thrown as pulse::app::Exit{code}.
struct Exit {
  int code = 0;
};

}  // namespace pulse::app
