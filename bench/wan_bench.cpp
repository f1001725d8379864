#include "bench/wan_bench.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bench/wan_net.h"
#include "bench/wan_procs.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace pulse::bench::wan {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// The dense BF16 bytes the trainer logged with its first GRPO line ("... 6.85 MB dense BF16"), or 0
/// while that line is not there yet.
double logged_dense_bytes(const std::string& err_path) {
  static const std::regex re(R"(GRPO: .* ([0-9]+\.[0-9]+) MB dense BF16)");
  std::smatch m;
  const std::string text = slurp(err_path);
  if (!std::regex_search(text, m, re)) return 0;
  return std::stod(m[1].str()) * 1e6;
}

std::string random_token() {
  std::random_device rd;
  std::ostringstream s;
  for (int i = 0; i < 4; ++i) s << std::hex << rd();
  return s.str();
}

/// The folder of this bench's runs, removed with everything in it.
struct WorkDir {
  std::string path;
  explicit WorkDir(std::string p) : path(std::move(p)) { fs::create_directories(path); }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// What a run needs to know about the link it makes.
LinkCase link_case(const LinkSpec& s) {
  LinkCase c;
  c.real_gbit = s.real_gbit;
  c.scaled = s.scaled;
  c.link_gbit = s.scaled ? 0 : s.real_gbit;  // scaled: set once the model's dense bytes are known
  c.delay_ms = s.delay_ms;
  return c;
}

int link_mtu(const LinkSpec& s) {
  // A scaled link is far below a Mbit/s for any model this machine trains: the smallest packets.
  return s.scaled ? 1500 : mtu_for_rate(s.real_gbit * 1e9);
}

/// Hosts, links and processes of one run; all removed by the destructor (processes first).
class RunSet {
 public:
  RunSet(const WanOptions& o, const std::string& tag, const std::string& dir) : o_(o), tag_(tag), dir_(dir) {
    fs::create_directories(dir_);
  }
  ~RunSet() {
    for (auto& p : procs_) p->stop(2);
    procs_.clear();
    links_.clear();
    hosts_.clear();
  }
  const std::string& host(const std::string& name) {
    hosts_.push_back(std::make_unique<Namespace>(namespace_name(o_.prefix, ::getpid(), name)));
    return hosts_.back()->name();
  }
  Link& link(const std::string& hub, const std::string& leaf, const LinkSpec& s) {
    links_.push_back(
        std::make_unique<Link>(static_cast<int>(links_.size()), hub, leaf, s.delay_ms, link_mtu(s)));
    return *links_.back();
  }
  Process& start(const std::string& what, const std::string& ns, std::vector<std::string> argv,
                 const std::vector<std::pair<std::string, std::string>>& env) {
    argv.insert(argv.begin(), o_.pulse);
    procs_.push_back(std::make_unique<Process>(what, ns, argv, env, dir_ + "/" + what));
    return *procs_.back();
  }
  void shape(double gbit) {
    for (auto& l : links_) l->shape(gbit * 1e9);
  }
  /// Throws naming the first process that ended with a non-zero code (its stderr tail quoted).
  void check_failures() {
    for (auto& p : procs_)
      if (!p->running() && p->exit_code() != 0)
        throw std::runtime_error("bench wan: " + tag_ + ": " + p->what() + " exited with code " +
                                 std::to_string(p->exit_code()) + "; the end of its log:\n" + p->err_tail());
  }
  void stop_all() {
    for (auto& p : procs_) p->stop(5);
  }

 private:
  const WanOptions& o_;
  std::string tag_, dir_;
  std::vector<std::unique_ptr<Namespace>> hosts_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<Process>> procs_;
};

std::vector<std::string> common_sets(const WanOptions& o, const std::string& run_dir) {
  std::vector<std::string> a = {
      "--set", "run.dir=" + run_dir, "--set", "sft.steps=" + std::to_string(o.sft_steps),
      // a short warm start needs a warmup shorter than itself
      "--set", "sft.warmup_steps=" + std::to_string(o.sft_steps / 5), "--set",
      "optimizer.lr=" + std::to_string(o.lr), "--set", "eval.before=false", "--set", "eval.after=false"};
  for (const auto& s : o.overrides) a.insert(a.end(), {"--set", s});
  return a;
}

/// Waits for the first GRPO line of every process in `trainers` (then shapes the links at the scaled
/// or face rate and returns), failing on a process error, a signal or the setup cap.
void shape_when_stepping(RunSet& set, std::vector<Process*> trainers, WanRun& run, const WanOptions& o,
                         double* model_bytes, const std::string& tag) {
  const auto t0 = Clock::now();
  for (;;) {
    StopSignals::check();
    set.check_failures();
    double bytes = 0;
    bool all = true;
    for (auto* p : trainers) {
      const double b = logged_dense_bytes(p->err_path());
      all = all && b > 0;
      bytes = b;
    }
    if (all) {
      *model_bytes = bytes;
      if (run.link.scaled) run.link.link_gbit = scaled_gbit(run.link.real_gbit, bytes);
      set.shape(run.link.link_gbit);
      return;
    }
    for (auto* p : trainers)
      if (!p->running())
        throw std::runtime_error("bench wan: " + tag + ": " + p->what() +
                                 " ended before its first GRPO step; the end of its log:\n" + p->err_tail());
    if (seconds_since(t0) > o.setup_cap_s)
      throw std::runtime_error("bench wan: " + tag + ": no GRPO step after " +
                               std::to_string(static_cast<int>(o.setup_cap_s)) + " s of setup");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// Waits for `main` to exit (true) or the cap (false: everything stopped).
bool wait_or_cap(RunSet& set, Process& main, double cap_s, Clock::time_point shaped) {
  for (;;) {
    StopSignals::check();
    set.check_failures();
    if (!main.running()) return true;
    if (seconds_since(shaped) > cap_s) {
      set.stop_all();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

WanRun run_sync(const WanOptions& o, const std::string& mode, const LinkSpec& spec, const std::string& dir,
                double* model_bytes, std::ostream& log) {
  WanRun run;
  run.path = "sync";
  run.mode = mode;
  run.link = link_case(spec);
  const std::string tag = "sync " + mode + " on " + run.link.label();
  RunSet set(o, tag, dir);
  const std::string t = set.host("t");
  std::vector<std::string> urls;
  for (int64_t i = 0; i < o.workers; ++i) {
    const std::string w = set.host("w" + std::to_string(i));
    urls.push_back("http://" + set.link(t, w, spec).hub_addr() + ":29600");
  }
  const std::string token = random_token();
  std::vector<std::string> targs = {"trainer", o.sync_config,
                                    "--set",   "run.workers=" + std::to_string(o.workers),
                                    "--set",   "transport.host=0.0.0.0",
                                    "--set",   "transport.port=29600",
                                    "--set",   "rl.steps=" + std::to_string(o.sync_steps),
                                    "--set",   "run.checkpoint_every=0",
                                    "--set",   "rl.max_lag=" + std::to_string(o.sync_max_lag)};
  run.max_lag = o.sync_max_lag;
  const auto common = common_sets(o, dir + "/run");
  targs.insert(targs.end(), common.begin(), common.end());
  if (mode == "dense")
    targs.insert(targs.end(), {"--set", "sync.dense=true", "--set", "sync.anchor_every=1"});
  Process& trainer = set.start("trainer", t, targs, {{"PULSE_TOKEN", token}});
  std::vector<Process*> workers;
  for (int64_t i = 0; i < o.workers; ++i) {
    const std::string id = "w" + std::to_string(i);
    workers.push_back(&set.start("worker-" + id, namespace_name(o.prefix, ::getpid(), id),
                                 {"worker", "--trainer", urls[static_cast<size_t>(i)], "--id", id,
                                  "--log-json", "--threads", "1", "--register-wait", "300"},
                                 {{"PULSE_TOKEN", token}}));
  }
  log << "pulse bench wan: " << tag << ": setting up (SFT, worker bootstrap on the unshaped link)"
      << std::endl;
  const auto t_start = Clock::now();
  shape_when_stepping(set, {&trainer}, run, o, model_bytes, tag);
  const auto shaped = Clock::now();
  log << "pulse bench wan: " << tag << ": link shaped to " << run.link.link_gbit * 1e3 << " Mbit/s after "
      << static_cast<int>(seconds_since(t_start)) << " s; " << o.sync_steps << " steps" << std::endl;
  run.complete = wait_or_cap(set, trainer, o.cap_s, shaped);
  if (run.complete) {  // the workers stop once the trainer says so
    const auto t_end = Clock::now();
    for (auto* w : workers)
      while (w->running() && seconds_since(t_end) < 30)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    set.check_failures();
  }
  run.wall_s = seconds_since(shaped);
  std::vector<std::vector<json>> events;
  for (auto* w : workers) events.push_back(read_json_lines(w->out_path()));
  fill_sync_run(run, read_json_lines(dir + "/run/metrics.jsonl"), events);
  // What the rate alone implies for a step's bytes: for a dense run the bootstrap anchor (version 0) is
  // exactly what each later step ships.
  double step_bytes = run.bytes_per_step.value_or(0);
  if (step_bytes == 0)
    for (const auto& e : events.empty() ? std::vector<json>{} : events[0])
      if (mode == "dense" && e.value("event", std::string()) == "applied" && e.value("version", 1) == 0)
        step_bytes = e.value("bytes", 0.0);
  if (step_bytes > 0 && run.link.link_gbit > 0)
    run.transfer_ms_expected = step_bytes * 8 / (run.link.link_gbit * 1e9) * 1e3;
  if (!run.complete) {
    run.note = "stopped " + std::to_string(static_cast<int>(o.cap_s)) + " s after shaping with " +
               std::to_string(run.steps) + " step(s) measured";
    if (run.transfer_ms_expected)
      run.note += "; each step's " + std::to_string(static_cast<int64_t>(step_bytes)) + " bytes take " +
                  std::to_string(static_cast<int64_t>(*run.transfer_ms_expected / 1000)) + " s at this rate";
    if (!run.step_ms) {
      run.worker_wait_ms = run.wall_s * 1000;  // a lower bound: the first step's weights still in flight
      run.note += " (worker wait is a lower bound)";
    }
  }
  return run;
}

WanRun run_loco(const WanOptions& o, const std::string& mode, const LinkSpec& spec, const std::string& dir,
                double* model_bytes, std::ostream& log) {
  WanRun run;
  run.path = "loco";
  run.mode = mode;
  run.link = link_case(spec);
  const std::string tag = "loco " + mode + " on " + run.link.label();
  RunSet set(o, tag, dir);
  const std::string r0 = set.host("r0"), r1 = set.host("r1");
  Link& link = set.link(r0, r1, spec);
  const int64_t steps = o.loco_rounds * o.inner_steps;
  std::vector<std::string> args = {
      "run",   o.loco_config,
      "--set", "multi.mode=" + mode,
      "--set", "rl.steps=" + std::to_string(steps),
      "--set", "multi.inner_steps=" + std::to_string(o.inner_steps),
      "--set", "run.checkpoint_every=" + std::to_string(o.inner_steps),
      "--set", "multi.timeout_s=" + std::to_string(static_cast<int>(o.cap_s + 120))};
  if (mode == "pulseloco") {
    args.insert(args.end(), {"--set", "multi.values=" + o.loco_values});
    run.values = o.loco_values;
  }
  const auto common = common_sets(o, dir + "/run");
  args.insert(args.end(), common.begin(), common.end());
  // torchrun's environment, as `pulse launch --nnodes 2` gives each node (app/cmd/launch.h).
  auto env = [&](int rank, const std::string& dev) {
    return std::vector<std::pair<std::string, std::string>>{{"RANK", std::to_string(rank)},
                                                            {"LOCAL_RANK", "0"},
                                                            {"WORLD_SIZE", "2"},
                                                            {"LOCAL_WORLD_SIZE", "1"},
                                                            {"GROUP_RANK", std::to_string(rank)},
                                                            {"MASTER_ADDR", link.hub_addr()},
                                                            {"MASTER_PORT", "29500"},
                                                            {"GLOO_SOCKET_IFNAME", dev},
                                                            {"OMP_NUM_THREADS", "1"}};
  };
  Process& rank0 = set.start("rank0", r0, args, env(0, link.hub_dev()));
  Process& rank1 = set.start("rank1", r1, args, env(1, link.leaf_dev()));
  log << "pulse bench wan: " << tag << ": setting up (SFT, initial weights on the unshaped link)"
      << std::endl;
  const auto t_start = Clock::now();
  shape_when_stepping(set, {&rank0, &rank1}, run, o, model_bytes, tag);
  const auto shaped = Clock::now();
  log << "pulse bench wan: " << tag << ": link shaped to " << run.link.link_gbit * 1e3 << " Mbit/s after "
      << static_cast<int>(seconds_since(t_start)) << " s; " << steps << " steps" << std::endl;
  run.complete = wait_or_cap(set, rank0, o.cap_s, shaped);
  if (run.complete) {
    const auto t_end = Clock::now();
    while (rank1.running() && seconds_since(t_end) < 30)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    set.check_failures();
  }
  run.wall_s = seconds_since(shaped);
  fill_loco_run(run, read_json_lines(dir + "/run/rank-0/metrics.jsonl"), o.inner_steps);
  if (!run.complete)
    run.note = (run.note.empty() ? "" : run.note + "; ") + "stopped " +
               std::to_string(static_cast<int>(o.cap_s)) + " s after shaping with " +
               std::to_string(run.steps) + " step(s) measured";
  return run;
}

}  // namespace

LinkSpec parse_link(const std::string& text) {
  LinkSpec s;
  const auto at = text.find('@');
  std::string rate = text.substr(0, at);
  try {
    if (!rate.empty() && rate.back() == 's') {
      s.scaled = true;
      rate.pop_back();
    }
    size_t used = 0;
    s.real_gbit = std::stod(rate, &used);
    if (used != rate.size() || !(s.real_gbit > 0)) throw std::invalid_argument("rate");
    if (at != std::string::npos) {
      const std::string d = text.substr(at + 1);
      s.delay_ms = std::stod(d, &used);
      if (used != d.size() || s.delay_ms < 0 || s.delay_ms > 10000) throw std::invalid_argument("delay");
    }
  } catch (const std::exception&) {
    throw std::invalid_argument("bench wan: link '" + text +
                                "' is not RATE[s]@DELAY (Gbit/s, s = scaled to the model, one-way ms), e.g. "
                                "0.2s@50");
  }
  return s;
}

std::vector<WanRun> run_wan_bench(const WanOptions& o, std::ostream& log, double* model_dense_bytes) {
  if (const std::string why = missing_prerequisites(); !why.empty())
    throw std::runtime_error("bench wan: " + why);
  std::vector<LinkSpec> sync_links, loco_links;
  for (const auto& l : o.sync_links) sync_links.push_back(parse_link(l));
  for (const auto& l : o.loco_links) loco_links.push_back(parse_link(l));
  for (const auto& m : o.sync_modes)
    if (m != "pulsesync" && m != "dense")
      throw std::invalid_argument("bench wan: sync mode '" + m + "' is not pulsesync or dense");
  for (const auto& m : o.loco_modes)
    if (m != "ddp" && m != "diloco" && m != "pulseloco")
      throw std::invalid_argument("bench wan: loco mode '" + m + "' is not ddp, diloco or pulseloco");
  StopSignals signals;
  const std::string tmp = fs::temp_directory_path().string();
  if (const int n = sweep_stale(o.prefix, tmp); n > 0)
    log << "pulse bench wan: removed " << n << " namespace(s) a killed bench left behind" << std::endl;
  WorkDir work(tmp + "/" + namespace_name(o.prefix, ::getpid(), "work"));
  std::vector<WanRun> runs;
  double bytes = 0;
  int index = 0;
  for (const auto& spec : sync_links)
    for (const auto& mode : o.sync_modes) {
      const std::string dir = work.path + "/" + std::to_string(index++) + "-sync-" + mode;
      runs.push_back(run_sync(o, mode, spec, dir, &bytes, log));
      fs::remove_all(dir);
    }
  for (const auto& spec : loco_links)
    for (const auto& mode : o.loco_modes) {
      const std::string dir = work.path + "/" + std::to_string(index++) + "-loco-" + mode;
      runs.push_back(run_loco(o, mode, spec, dir, &bytes, log));
      fs::remove_all(dir);
    }
  if (model_dense_bytes) *model_dense_bytes = bytes;
  return runs;
}

}  // namespace pulse::bench::wan
