// configs/gpu-0.5b.toml (issue 30) without training it: the file passes the config check (run.device set
// to cpu: cuda is refused where no GPU is usable, tests/app/test_device.cpp), and its model.config with the
// real Qwen2 tokenizer (../shared/models/qwen2-tokenizer, 151,646 ids) gives the Qwen2.5-0.5B shape: the
// embedding keeps its 151,936 rows, 494,032,768 parameters.
#include "tests/torch_catch.h"

#include "app/config.h"
#include "app/setup.h"
#include "model/model_size.h"
#include "model/tokenizer.h"
#include "sync/io/atomic_file.h"
#include "tests/test_paths.h"

using pulse::test::source_path;

TEST_CASE("configs/gpu-0.5b.toml is a Qwen2.5-0.5B-shaped BF16 GRPO run on cuda",
          "[app][config][gpu-config]") {
  const auto config = pulse::app::load_config(source_path("configs/gpu-0.5b.toml"), {"run.device=cpu"});
  CHECK(config.model.path.empty());  // random init, then the SFT warm start
  CHECK(config.model.dtype == "bfloat16");
  CHECK(config.data.task == pulse::app::DataTask::SyntheticMath);
  CHECK(config.sft.loop.steps > 0);
  CHECK(config.optimizer.lr == 1e-6);
  CHECK(config.run.workers == 2);
  // The file itself asks for cuda (checked as text: parsing it with cuda needs a usable GPU).
  const std::string text = pulse::sync::read_file(source_path("configs/gpu-0.5b.toml"));
  CHECK(text.find("\ndevice = \"cuda\"") != std::string::npos);
  // The documented 3e-6 variant is accepted.
  CHECK(pulse::app::load_config(source_path("configs/gpu-0.5b.toml"), {"run.device=cpu", "optimizer.lr=3e-6"})
            .optimizer.lr == 3e-6);

  // Paths in the file are taken from the current directory: the checkout, as for `pulse run`.
  pulse::app::Config resolved = config;
  resolved.model.config = source_path(config.model.config);
  const auto tok = pulse::model::load_tokenizer(source_path(config.tokenizer.path));
  CHECK(tok->vocab_size() == 151646);
  const auto mc = pulse::app::model_config_for(resolved, *tok);
  CHECK(mc.model_type == "qwen2");
  CHECK(mc.vocab_size == 151936);
  CHECK(mc.hidden_size == 896);
  CHECK(mc.num_hidden_layers == 24);
  CHECK(mc.tie_word_embeddings);
  CHECK(pulse::model::parameter_count(mc) == 494'032'768);
}
