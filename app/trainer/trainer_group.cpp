// The trainer's side of a multi-trainer run (app/trainer/trainer_group.h).
#include "app/trainer/trainer_group.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "app/device.h"
#include "model/static_decode.h"
#include "rl/optimizer.h"

using nlohmann::json;

namespace pulse::app {

GroupMembership join_trainer_group(const Config& config) {
  GroupMembership m;
  rl::GroupOptions o = rl::GroupOptions::from_env(config.multi.timeout_s);
  m.device = resolve_device(config.run.device, o.local_rank);
  if (m.device.is_cuda()) o.cuda_device = m.device.index();
  // rl.decode = cuda_graph with run.device = auto on a machine without a GPU: say so now, not after SFT.
  try {
    model::resolve_decode_mode(config.rl.grpo.sampling.decode, m.device);
  } catch (const std::invalid_argument& e) {
    throw ConfigError("key 'rl.decode' = \"" + std::string(model::name_of(config.rl.grpo.sampling.decode)) +
                      "\" cannot be used with run.device = \"" + config.run.device + "\" here: " + e.what());
  }
  if (config.multi.mode == rl::MultiMode::Single) {
    if (o.world_size > 1)
      throw ConfigError("multi.mode = single but WORLD_SIZE = " + std::to_string(o.world_size) +
                        ": set multi.mode to ddp, diloco or pulseloco for several trainers");
    return m;
  }
  if (o.world_size == 1)
    spdlog::warn("multi.mode = {} with one trainer: the outer rounds run locally",
                 rl::name_of(config.multi.mode));
  m.group = std::make_unique<rl::TrainerGroup>(o);
  rl::TrainerGroup& group = *m.group;
  spdlog::info("trainer rank {} of {} ({} via {}:{}; {})", group.rank(), group.world_size(),
               rl::name_of(config.multi.mode), o.master_addr, o.master_port,
               group.nccl_active()  ? "NCCL for the CUDA gradients, Gloo for bytes"
               : m.device.is_cuda() ? "Gloo through host copies of the CUDA tensors"
                                    : "Gloo");
  // Every rank must run the same config (bar its run directory): compare a hash of it.
  Config c = config;
  c.run.dir.clear();
  const std::string text = to_toml(c);
  const auto hashes =
      group.allgather_i64({static_cast<int64_t>(XXH3_64bits(text.data(), text.size()))}, "config hash");
  for (int r = 0; r < group.world_size(); ++r)
    if (hashes[static_cast<size_t>(r)] != hashes[static_cast<size_t>(group.rank())])
      throw ConfigError("rank " + std::to_string(group.rank()) + ": rank " + std::to_string(r) +
                        " runs a different config (every trainer needs the same config and --set values)");
  return m;
}

std::string agree_run_dir(rl::TrainerGroup* group, std::string base) {
  if (!group) return base;
  auto bytes = group->broadcast_bytes(std::vector<uint8_t>(base.begin(), base.end()), 0, "run directory");
  return std::string(bytes.begin(), bytes.end());
}

void agree_setup(rl::TrainerGroup* group, bool ok, RunDir& run_dir) {
  std::vector<int64_t> failed(1, ok ? 0 : 1);  // without a group: this process's own status
  if (group) {
    try {
      failed = group->allgather_i64(failed, "setup status");
    } catch (const std::exception&) {
      if (ok) throw;
    }
  }
  const auto first = std::find(failed.begin(), failed.end(), 1);
  if (first == failed.end()) return;
  run_dir.discard();
  if (group) {
    try {
      group->barrier("setup failure: run directories removed");
    } catch (const std::exception&) {  // a peer already gone
    }
  }
  if (!ok) return;  // the caller rethrows this rank's own error
  const auto first_failed = first - failed.begin();
  throw std::runtime_error(
      "trainer rank " + std::to_string(first_failed) +
      " could not set up (its log says why); this rank stops too" +
      (run_dir.is_new() ? ", and its new run directory " + run_dir.path() + " was removed" : ""));
}

void broadcast_initial_weights(rl::TrainerGroup& group, rl::MasterAdam& adam) {
  for (auto& m : adam.master_tensors()) {
    at::Tensor host = m.to(torch::kCPU).contiguous();  // m itself on a CPU run, a copy on a GPU
    const auto* p = static_cast<const uint8_t*>(host.data_ptr());
    std::vector<uint8_t> mine(p, p + host.numel() * sizeof(float));
    auto got = group.broadcast_bytes(group.rank() == 0 ? mine : std::vector<uint8_t>(), 0, "initial weights");
    if (got.size() != mine.size())
      throw std::runtime_error("initial weights: rank 0 sent " + std::to_string(got.size()) +
                               " bytes for a master of " + std::to_string(mine.size()));
    std::memcpy(host.data_ptr(), got.data(), got.size());
    if (!host.is_same(m)) m.copy_(host);
  }
  adam.cast_to_model();
}

std::vector<rl::Problem> rank_shard(const rl::TrainerGroup& group, std::vector<rl::Problem> problems) {
  if (group.world_size() <= 1) return problems;
  std::vector<rl::Problem> shard;
  for (size_t i = 0; i < problems.size(); ++i)
    if (static_cast<int>(i % static_cast<size_t>(group.world_size())) == group.rank())
      shard.push_back(problems[i]);
  return shard;
}

void add_comm_bytes(StepRecord& r, const rl::TrainerGroup& group, const rl::CommCounters& at_step_start) {
  const rl::CommCounters now = group.stats().total();
  r.extra["comm_payload_bytes"] = now.payload_bytes - at_step_start.payload_bytes;
  r.extra["comm_wire_bytes"] = now.wire_bytes - at_step_start.wire_bytes;
  r.extra["rank"] = group.rank();
  r.extra["world_size"] = group.world_size();
}

json multi_summary(const Config& config, const rl::TrainerGroup& group, bool outer_rounds, uint64_t params,
                   const std::vector<json>& rows) {
  uint64_t payload = 0, wire = 0, rounds = 0;
  double fired = 0;
  for (const auto& r : rows) {
    payload += r.value("comm_payload_bytes", uint64_t{0});
    wire += r.value("comm_wire_bytes", uint64_t{0});
    if (r.contains("fired_fraction")) {
      ++rounds;
      fired += r.at("fired_fraction").get<double>();
    }
  }
  json out{{"mode", rl::name_of(config.multi.mode)},
           {"values", sync::loco_values_name(config.multi.values)},
           {"rank", group.rank()},
           {"world_size", group.world_size()},
           {"comm_payload_bytes_total", payload},
           {"comm_wire_bytes_total", wire}};
  // What the dense exchanges of the same run would hand to the collectives: an FP32 gradient per step
  // (DDP) or an FP32 pseudo-gradient per outer round (DiLoCo), 4 bytes per parameter each time.
  const uint64_t steps = static_cast<uint64_t>(rows.size());
  out["ddp_bytes_equivalent"] = 4 * params * steps;
  if (outer_rounds) {  // outer rounds (diloco, pulseloco); ddp has none
    out["inner_steps"] = config.multi.inner_steps;
    out["rounds"] = rounds;
    out["mean_fired_fraction"] = rounds > 0 ? fired / static_cast<double>(rounds) : 0.0;
    out["dense_diloco_bytes_equivalent"] = 4 * params * rounds;
  }
  return out;
}

}  // namespace pulse::app
