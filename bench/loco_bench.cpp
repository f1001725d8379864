#include "bench/loco_bench.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace pulse::bench {

using nlohmann::json;

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(path + ": not JSON");
  return j;
}

const LocoModeResult* find(const std::vector<LocoModeResult>& modes, const std::string& name) {
  for (const auto& m : modes)
    if (m.mode == name) return &m;
  return nullptr;
}

double ratio(const LocoModeResult* a, const LocoModeResult* b) {
  if (!a || !b || b->payload_bytes == 0) return 0;
  return static_cast<double>(a->payload_bytes) / static_cast<double>(b->payload_bytes);
}

}  // namespace

std::vector<std::string> loco_mode_settings(const std::string& mode) {
  if (mode == kLocoUlpMode) return {"multi.mode=pulseloco", "multi.values=ulp"};
  if (mode == "pulseloco") return {"multi.mode=pulseloco", "multi.values=fp32"};
  return {"multi.mode=" + mode};
}

LocoModeResult read_loco_run(const std::string& run_dir, const std::string& mode, int64_t inner_steps) {
  LocoModeResult r;
  r.mode = mode;
  const std::string dir = run_dir + "/rank-0";
  json s = read_json_file(dir + "/summary.json");
  r.steps = s.at("steps").get<int64_t>();
  r.reward_last = s.at("reward_last").get<double>();
  // null: not measured (eval off); NaN in the table and null in the JSON then.
  auto measured = [&](const char* key) {
    return s.at(key).is_number() ? s.at(key).get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  r.pass_at_1_before = measured("pass_at_1_before");
  r.pass_at_1_after = measured("pass_at_1_after");
  r.wall_seconds = s.at("wall_seconds").get<double>();
  const json& m = s.at("multi");
  r.world_size = m.at("world_size").get<int64_t>();
  r.payload_bytes = m.at("comm_payload_bytes_total").get<uint64_t>();
  r.wire_bytes = m.at("comm_wire_bytes_total").get<uint64_t>();
  // ddp has no outer rounds and no gate: NaN, "-" in the table and null in the JSON (it was 0.0).
  r.fired_fraction = m.contains("mean_fired_fraction") ? m.at("mean_fired_fraction").get<double>()
                                                       : std::numeric_limits<double>::quiet_NaN();
  r.rounds = inner_steps > 0 ? r.steps / inner_steps : 0;
  r.bytes_per_round = r.rounds > 0 ? static_cast<double>(r.payload_bytes) / static_cast<double>(r.rounds) : 0;
  std::ifstream rows(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(rows, line)) {
    json row = json::parse(line, nullptr, false);
    if (row.is_discarded()) continue;
    r.reward.push_back(row.value("reward_mean", 0.0));
    r.fired_total += row.value("fired", uint64_t{0});
  }
  r.bytes_per_fired = r.fired_total > 0
                          ? static_cast<double>(r.payload_bytes) / static_cast<double>(r.fired_total)
                          : std::numeric_limits<double>::quiet_NaN();
  return r;
}

std::string loco_table(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "pulse bench loco: %lld trainers, H = %lld inner steps, GRPO lr %.3g\n\n",
                static_cast<long long>(modes.empty() ? 0 : modes[0].world_size),
                static_cast<long long>(inner_steps), lr);
  o << buf;
  o << "mode           steps rounds  bytes/trainer (window)  bytes/round    fired  B/fired   reward_last  "
       "Pass@1 before->after\n";
  for (const auto& m : modes) {
    char fired[16] = "      -", per[16] = "     -";
    if (!std::isnan(m.fired_fraction)) std::snprintf(fired, sizeof fired, "%7.4f", m.fired_fraction);
    if (!std::isnan(m.bytes_per_fired)) std::snprintf(per, sizeof per, "%6.3f", m.bytes_per_fired);
    std::snprintf(buf, sizeof buf, "%-13s %6lld %6lld  %20.3f MB  %9.3f MB  %s  %s   %10.3f   %.3f -> %.3f\n",
                  m.mode.c_str(), static_cast<long long>(m.steps), static_cast<long long>(m.rounds),
                  m.payload_bytes / 1e6, m.bytes_per_round / 1e6, fired, per, m.reward_last,
                  m.pass_at_1_before, m.pass_at_1_after);
    o << buf;
  }
  o << "\n";
  for (const char* x : {"pulseloco", kLocoUlpMode}) {
    const auto* p = find(modes, x);
    if (!p) continue;
    std::snprintf(buf, sizeof buf, "diloco / %s bytes: %.1fx   ddp / %s bytes: %.1fx\n", x,
                  ratio(find(modes, "diloco"), p), x, ratio(find(modes, "ddp"), p));
    o << buf;
  }
  o << "reward per step:\n";
  for (const auto& m : modes) {
    o << "  " << m.mode << ":";
    for (double x : m.reward) {
      std::snprintf(buf, sizeof buf, " %.3f", x);
      o << buf;
    }
    o << "\n";
  }
  return o.str();
}

std::string loco_json(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr) {
  json j;
  json fired = json::object(), per_fired = json::object(), reward_last = json::object(),
       details = json::object();
  int64_t rounds = 0;
  for (const auto& m : modes) {
    j[m.mode + "_bytes"] = m.payload_bytes;
    fired[m.mode] = m.fired_fraction;
    per_fired[m.mode] = m.bytes_per_fired;  // NaN (ddp) is written as null
    reward_last[m.mode] = m.reward_last;
    rounds = std::max(rounds, m.rounds);
    details[m.mode] = json{{"steps", m.steps},
                           {"world_size", m.world_size},
                           {"payload_bytes", m.payload_bytes},
                           {"wire_bytes", m.wire_bytes},
                           {"bytes_per_round", m.bytes_per_round},
                           {"fired_total", m.fired_total},
                           {"reward", m.reward},
                           {"pass_at_1_before", m.pass_at_1_before},
                           {"pass_at_1_after", m.pass_at_1_after},
                           {"wall_seconds", m.wall_seconds}};
  }
  j["fired_fraction"] = fired;
  j["bytes_per_fired"] = per_fired;
  j["reward_last"] = reward_last;
  j["rounds"] = rounds;
  j["inner_steps"] = inner_steps;
  j["lr"] = lr;
  j["modes"] = details;
  for (const char* x : {"pulseloco", kLocoUlpMode}) {
    const auto* p = find(modes, x);
    if (!p) continue;
    j[std::string("diloco_over_") + x] = ratio(find(modes, "diloco"), p);
    j[std::string("ddp_over_") + x] = ratio(find(modes, "ddp"), p);
  }
  return j.dump(2);
}

}  // namespace pulse::bench
