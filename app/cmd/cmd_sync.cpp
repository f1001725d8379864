// `pulse sync diff|anchor|apply|inspect|verify|bench`: the PULSESync codec on checkpoints (safetensors files
// or HF folders) from the command line. Byte layout of patches: sync/FORMAT.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "app/cli_checks.h"
#include "app/cmd/commands.h"
#include "bench/sync_bench_cli.h"
#include "sync/hash.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "sync/patch.h"

namespace pulse::app {

namespace {

struct SyncCliOptions {
  std::string base, target, model, patch, out;
  std::string values = "absolute";
  int zstd_level = sync::PatchOptions{}.zstd_level;  // the codec's defaults, declared in sync/patch.h
  int threads = sync::PatchOptions{}.threads;
  uint64_t base_version = 0, target_version = 1;
  std::string model_id;
  bench::SyncBenchCli bench;
};

std::vector<uint8_t> read_patch(const std::string& path) {
  const std::string s = sync::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

/// Runs fn, prefixing codec errors with the patch file they concern.
template <typename F>
void with_patch_errors(const std::string& path, F&& fn) {
  try {
    fn();
  } catch (const sync::PatchError& e) {
    throw std::runtime_error("patch '" + path + "': " + e.what());
  }
}

sync::PatchOptions patch_options(const SyncCliOptions& o) {
  sync::PatchOptions opt;
  opt.values = o.values == "delta" ? sync::ValueMode::Delta : sync::ValueMode::Absolute;
  opt.zstd_level = o.zstd_level;
  opt.threads = o.threads;
  opt.base_version = o.base_version;
  opt.target_version = o.target_version;
  opt.model_id = o.model_id;
  return opt;
}

void write_patch_summary(const std::string& out, const std::vector<uint8_t>& patch);

/// Throws when OUT is the same file as one of the inputs (`-o BASE` would replace the checkpoint by its
/// patch). Same file = same device and inode (std::filesystem::equivalent), so links and other spellings
/// of the path are caught too.
void refuse_output_over_input(const std::string& out,
                              std::initializer_list<std::pair<const char*, std::string>> inputs) {
  for (const auto& [what, path] : inputs) {
    std::error_code ec;
    if (std::filesystem::equivalent(out, path, ec))
      throw std::runtime_error("-o '" + out + "' is the " + what + " '" + path +
                               "': writing the patch there would replace it; choose another output file");
  }
}

void cmd_diff(const SyncCliOptions& o) {
  refuse_output_over_input(o.out, {{"BASE", o.base}, {"TARGET", o.target}});
  const auto base = sync::Checkpoint::open(o.base);
  const auto target = sync::Checkpoint::open(o.target);
  const sync::PatchOptions opt = patch_options(o);
  std::vector<uint8_t> patch;
  try {
    patch = sync::encode_patch(base.tensors(), target.tensors(), opt);
  } catch (const sync::PatchError& e) {
    throw std::runtime_error("diff '" + o.base + "' -> '" + o.target + "': " + e.what());
  }
  write_patch_summary(o.out, patch);
}

/// `pulse sync anchor MODEL -o OUT`: a full snapshot (dense, absolute) a worker can start or recover from.
void cmd_anchor(const SyncCliOptions& o) {
  refuse_output_over_input(o.out, {{"MODEL", o.model}});
  const auto model = sync::Checkpoint::open(o.model);
  std::vector<uint8_t> patch;
  try {
    patch = sync::encode_anchor(model.tensors(), patch_options(o));
  } catch (const sync::PatchError& e) {
    throw std::runtime_error("anchor of '" + o.model + "': " + e.what());
  }
  write_patch_summary(o.out, patch);
}

/// Writes the patch atomically and prints its size and density.
void write_patch_summary(const std::string& out, const std::vector<uint8_t>& patch) {
  sync::write_file_atomic(out, patch.data(), patch.size());
  const auto info = sync::inspect_patch(patch.data(), patch.size());
  uint64_t changed = 0, elements = 0;
  for (const auto& t : info.tensors) {
    changed += t.changed;
    elements += static_cast<uint64_t>(sync::numel(t.shape));
  }
  std::cout << out << ": " << (info.anchor ? "anchor, " : "") << patch.size() << " bytes, " << changed
            << " of " << elements << " elements changed (" << std::setprecision(4)
            << 100.0 * changed / std::max<uint64_t>(1, elements) << "%), " << std::setprecision(4)
            << (changed ? double(patch.size()) / changed : 0.0) << " bytes/change\n";
}

void cmd_apply(const SyncCliOptions& o) {
  const auto base = sync::Checkpoint::open(o.base);
  std::vector<std::vector<uint8_t>> owned;
  std::vector<sync::MutableTensorView> weights;
  for (const auto& t : base.tensors()) owned.emplace_back(t.data, t.data + t.nbytes);
  for (size_t i = 0; i < owned.size(); ++i) {
    const auto& t = base.tensors()[i];
    weights.push_back({t.name, t.dtype, t.shape, owned[i].data(), owned[i].size()});
  }
  const auto patch = read_patch(o.patch);
  bool changed = false;
  with_patch_errors(o.patch,
                    [&] { changed = sync::apply_patch(weights, patch.data(), patch.size(), o.threads); });
  std::vector<sync::TensorView> views;
  for (const auto& w : weights) views.push_back(w.view());
  sync::write_safetensors(o.out, views, base.metadata());  // the base's __metadata__ (e.g. format: pt)
  const auto info = sync::inspect_patch(patch.data(), patch.size());
  // OUT is written either way: when nothing changed it is a copy of BASE (which is already the target).
  std::cout << o.out << ": "
            << (changed ? "patched"
                        : "written unpatched (the base '" + o.base + "' was already at the target)")
            << ", version " << info.target_version << ", root " << sync::hash_hex(info.target_root_hash)
            << "\n";
}

void cmd_inspect(const SyncCliOptions& o) {
  const auto patch = read_patch(o.patch);
  sync::PatchInfo info;
  with_patch_errors(o.patch, [&] { info = sync::inspect_patch(patch.data(), patch.size()); });
  static const char* kCoding[] = {"varint", "bitmap", "dense"};
  std::ostringstream s;
  s << o.patch << ": PULSESync format " << info.format_version << (info.anchor ? ", anchor" : ", patch")
    << ", values " << (info.values == sync::ValueMode::Delta ? "delta" : "absolute") << "\n"
    << "  model id       " << (info.model_id.empty() ? "(none)" : info.model_id) << "\n";
  if (!info.anchor)
    s << "  base version   " << info.base_version << " root " << sync::hash_hex(info.base_root_hash) << "\n";
  s << "  target version " << info.target_version << " root " << sync::hash_hex(info.target_root_hash) << "\n"
    << "  bytes          " << info.total_bytes << " (header " << info.header_bytes << ", payload "
    << info.payload_compressed_bytes << " from " << info.payload_raw_bytes << " raw in " << info.n_chunks
    << " chunks of at most " << info.chunk_bytes << ", zstd level " << info.zstd_level << ")\n";
  if (patch.size() != info.total_bytes)
    s << "  WARNING: file holds " << patch.size() << " bytes, header promises " << info.total_bytes << "\n";
  // The header alone says nothing of the payload: a flipped payload byte would print as a sound patch.
  const std::string damaged = sync::check_patch_payload(patch.data(), patch.size());
  if (damaged.empty())
    s << "  payload        every chunk's checksum and size check out\n";
  else
    s << "  WARNING: payload damaged: " << damaged << "\n";
  s << "  " << std::left << std::setw(48) << "tensor" << std::setw(6) << "dtype" << std::right
    << std::setw(14) << "elements" << std::setw(12) << "changed" << std::setw(10) << "density" << std::setw(8)
    << "index" << std::setw(12) << "index B" << std::setw(12) << "value B"
    << "  target hash\n";
  uint64_t changed = 0, elements = 0;
  for (const auto& t : info.tensors) {
    const uint64_t n = static_cast<uint64_t>(sync::numel(t.shape));
    changed += t.changed;
    elements += n;
    s << "  " << std::left << std::setw(48) << t.name << std::setw(6) << sync::dtype_name(t.dtype)
      << std::right << std::setw(14) << n << std::setw(12) << t.changed << std::setw(9) << std::fixed
      << std::setprecision(3) << (n ? 100.0 * t.changed / n : 0.0) << "%" << std::setw(8)
      << kCoding[t.index_coding] << std::setw(12) << t.index_bytes << std::setw(12) << t.value_bytes << "  "
      << sync::hash_hex(t.target_hash) << "\n";
  }
  s << "  total: " << info.tensors.size() << " tensors, " << changed << " of " << elements
    << " elements changed (" << std::setprecision(4) << 100.0 * changed / std::max<uint64_t>(1, elements)
    << "%)";
  if (changed) s << ", " << std::setprecision(3) << double(info.total_bytes) / changed << " bytes/change";
  std::cout << s.str() << "\n";
}

void cmd_verify(const SyncCliOptions& o) {
  const auto patch = read_patch(o.patch);
  sync::PatchInfo info;
  with_patch_errors(o.patch, [&] { info = sync::inspect_patch(patch.data(), patch.size()); });
  const auto model = sync::Checkpoint::open(o.model);
  std::vector<std::string> problems;
  for (const auto& t : info.tensors) {
    const auto* m = model.find(t.name);
    if (!m) {
      problems.push_back("tensor '" + t.name + "' is missing from the model");
    } else if (m->dtype != t.dtype || m->shape != t.shape) {
      problems.push_back("tensor '" + t.name + "' has a different dtype or shape");
    } else if (const uint64_t h = sync::tensor_hash(*m, sync::hash_scheme_of_format(info.format_version));
               h != t.target_hash) {
      problems.push_back("tensor '" + t.name + "' hash " + sync::hash_hex(h) + " != target " +
                         sync::hash_hex(t.target_hash));
    }
  }
  if (model.tensors().size() != info.tensors.size())
    problems.push_back("the model holds " + std::to_string(model.tensors().size()) + " tensors, the patch " +
                       std::to_string(info.tensors.size()));
  // The model is compared with the header's target hashes, which a damaged payload does not change; say
  // so rather than let "matches" read as "the patch is fine".
  const std::string damaged = sync::check_patch_payload(patch.data(), patch.size());
  if (!damaged.empty())
    std::cerr << "WARNING: '" << o.patch << "' is damaged (" << damaged
              << "); the model was checked against its header's target hashes only\n";
  if (problems.empty()) {
    std::cout << o.model << " matches target version " << info.target_version << " (root "
              << sync::hash_hex(info.target_root_hash) << ")\n";
    return;
  }
  std::cerr << o.model << " does not match target version " << info.target_version << " of '" << o.patch
            << "':\n";
  for (const auto& p : problems) std::cerr << "  " << p << "\n";
  throw Exit{1};
}

void cmd_bench(const SyncCliOptions& o) {
  if (const int status = bench::run_sync_bench_cli(o.bench, std::cout, std::cerr)) throw Exit{status};
}

}  // namespace

void register_sync_commands(CLI::App& root) {
  auto o = std::make_shared<SyncCliOptions>();
  auto* sync_cmd =
      root.add_subcommand("sync", "PULSESync patches: diff, anchor, apply, inspect, verify, bench");
  sync_cmd->require_subcommand(1);

  auto* diff = sync_cmd->add_subcommand("diff", "encode the changed elements TARGET - BASE into PATCH");
  diff->add_option("base", o->base, "base checkpoint (.safetensors or HF folder)")->required();
  diff->add_option("target", o->target, "target checkpoint (.safetensors or HF folder)")->required();
  diff->add_option("-o,--out", o->out, "patch file to write (atomically)")->required();
  diff->add_option("--values", o->values, "value mode")
      ->check(CLI::IsMember({"absolute", "delta"}))
      ->capture_default_str();
  diff->add_option("--zstd-level", o->zstd_level, "zstd level 1..22, 0 = none")
      ->check(CLI::Range(0, 22))
      ->capture_default_str();
  diff->add_option("--base-version", o->base_version, "version number of BASE")
      ->check(non_negative_integer())
      ->capture_default_str();
  diff->add_option("--target-version", o->target_version, "version number of TARGET")
      ->check(non_negative_integer())
      ->capture_default_str();
  diff->add_option("--model-id", o->model_id, "free text naming the model lineage");
  diff->add_option("--threads", o->threads, "threads (0 = all cores)")->capture_default_str();
  diff->callback([o] { cmd_diff(*o); });

  auto* anchor = sync_cmd->add_subcommand("anchor", "write a full snapshot of MODEL (an anchor) to OUT");
  anchor->add_option("model", o->model, "checkpoint (.safetensors or HF folder)")->required();
  anchor->add_option("-o,--out", o->out, "anchor file to write (atomically)")->required();
  anchor->add_option("--zstd-level", o->zstd_level, "zstd level 1..22, 0 = none")
      ->check(CLI::Range(0, 22))
      ->capture_default_str();
  anchor->add_option("--version", o->target_version, "version number of MODEL")
      ->check(non_negative_integer())
      ->capture_default_str();
  anchor->add_option("--model-id", o->model_id, "free text naming the model lineage");
  anchor->add_option("--threads", o->threads, "threads (0 = all cores)")->capture_default_str();
  anchor->callback([o] { cmd_anchor(*o); });

  auto* apply = sync_cmd->add_subcommand("apply", "apply PATCH to BASE and write the result to OUT");
  apply->add_option("base", o->base, "base checkpoint (.safetensors or HF folder)")->required();
  apply->add_option("patch", o->patch, "patch file")->required()->check(CLI::ExistingFile);
  apply->add_option("-o,--out", o->out, "safetensors file to write (atomically)")->required();
  apply->add_option("--threads", o->threads, "threads (0 = all cores)")->capture_default_str();
  apply->callback([o] { cmd_apply(*o); });

  auto* inspect = sync_cmd->add_subcommand(
      "inspect",
      "print a patch's versions, tensors, density and stream sizes; checks its payload's "
      "chunk checksums (warns, exit 0)");
  inspect->add_option("patch", o->patch, "patch file")->required()->check(CLI::ExistingFile);
  inspect->callback([o] { cmd_inspect(*o); });

  auto* verify = sync_cmd->add_subcommand(
      "verify",
      "check that MODEL equals PATCH's target (exit 1 if not); warns when PATCH's payload is damaged");
  verify->add_option("model", o->model, "checkpoint (.safetensors or HF folder)")->required();
  verify->add_option("patch", o->patch, "patch file")->required()->check(CLI::ExistingFile);
  verify->callback([o] { cmd_verify(*o); });

  auto* bench_cmd = sync_cmd->add_subcommand(
      "bench", "patch size and speed vs the entropy bound, the reference format, zstd and memcpy");
  bench::add_sync_bench_options(*bench_cmd, o->bench);
  bench_cmd->callback([o] { cmd_bench(*o); });
}

}  // namespace pulse::app
