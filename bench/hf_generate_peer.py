#!/usr/bin/env python3
"""Hugging Face transformers' generate() on a random-init model: the peer of `pulse bench generate`.

    python3 bench/hf_generate_peer.py [--model-config configs/qwen2.5-0.5b.json] [--batch 64,384]
        [--prompt-tokens 64] [--new-tokens 256] [--dtype bfloat16|float32] [--device cuda|cpu|auto]
        [--temperature 1.0] [--seed 0] [--repeats 1] [--cache-implementation dynamic[,static]]

Used only for this comparison (issue 33: pulse >= 2x HF tokens/s on a 0.5B-shaped model at batch 64 and
384, 256 new tokens); pulse itself runs no Python. Builds the model from the same config.json as pulse
(AutoConfig.for_model + AutoModelForCausalLM.from_config: random weights, HF's init), random prompts of
--prompt-tokens ids (no padding), and per batch and cache implementation runs one warm-up and --repeats
timed model.generate(input_ids, attention_mask, max_new_tokens=N, min_new_tokens=N, do_sample=T>0,
temperature=T, top_p=1, top_k=0, pad_token_id=0) calls, the device synchronised before and after: every
row produces exactly N tokens (EOS is suppressed until N by min_new_tokens, and N is the maximum).
tokens/s = batch * N / median wall seconds of a call, prefill included, as pulse counts it.

--cache-implementation static tries HF's StaticCache (generate(cache_implementation="static"); transformers
>= 4.48 then compiles the forward with torch.compile by itself, which the warm-up call absorbs); a run that
fails is recorded with its error string and the others still run. All batches of one cache implementation
run before the next; after each run the report so far goes to stderr with "partial": true.

Prints one JSON object on stdout: {"peer": "hf_transformers", "transformers_version", "torch_version",
"device", "dtype", ..., "runs": [{"batch", "cache_implementation", "tokens_per_s", "wall_s", "wall_s_each",
"new_tokens", "error"}]}. Exit 0 when every dynamic-cache run worked (and at least one run did), 1 otherwise,
2 for a usage error or a machine without torch/transformers (the message says which is missing).
"""
import argparse
import json
import math
import sys
import time

MAX_BATCH = 4096  # the same ranges as `pulse bench generate` (bench/generate_bench.h)
MAX_TOKENS = 32768
MAX_REPEATS = 100
CACHE_IMPLEMENTATIONS = ("dynamic", "static")


def int_list(text):
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers, e.g. 64,384")
    return values


def name_list(text):
    names = [x.strip() for x in text.split(",") if x.strip()]
    for n in names:
        if n not in CACHE_IMPLEMENTATIONS:
            raise argparse.ArgumentTypeError(f"'{n}' is not one of {', '.join(CACHE_IMPLEMENTATIONS)}")
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"'{text}': give each of {', '.join(CACHE_IMPLEMENTATIONS)} at most once")
    return names


def parse_args(argv):
    p = argparse.ArgumentParser(description="HF transformers generate() tokens/s, the peer of `pulse bench generate`")
    p.add_argument("--model-config", default="configs/qwen2.5-0.5b.json", help="HF config.json (random weights)")
    p.add_argument("--batch", type=int_list, default=[64, 384], help="rows per call, comma-separated (default 64,384)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="random prompt ids per row (default 64)")
    p.add_argument("--new-tokens", type=int, default=256, help="tokens generated per row, exactly (default 256)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                   help="compute dtype (default: bfloat16 on CUDA, float32 on the CPU)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto", help="default auto: cuda when usable")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, prompts and sampling")
    p.add_argument("--repeats", type=int, default=1, help="timed calls after one warm-up; the median is reported")
    p.add_argument("--cache-implementation", type=name_list, default=["dynamic"],
                   help="KV caches to run, comma-separated: dynamic (HF's default), static (StaticCache)")
    a = p.parse_args(argv)
    for b in a.batch:
        if not 1 <= b <= MAX_BATCH:
            p.error(f"--batch {b}: must be in 1..{MAX_BATCH}")
    for name in ("prompt_tokens", "new_tokens"):
        v = getattr(a, name)
        if not 1 <= v <= MAX_TOKENS:
            p.error(f"--{name.replace('_', '-')} {v}: must be in 1..{MAX_TOKENS}")
    if not 1 <= a.repeats <= MAX_REPEATS:
        p.error(f"--repeats {a.repeats}: must be in 1..{MAX_REPEATS}")
    if not (math.isfinite(a.temperature) and a.temperature >= 0):
        p.error(f"--temperature {a.temperature}: must be a finite number >= 0 (0 = greedy)")
    if a.seed < 0:
        p.error(f"--seed {a.seed}: must be >= 0")
    return a


def load_libraries():
    """torch and transformers, or exit 2 naming what is missing."""
    missing = []
    try:
        import torch  # noqa: F401
    except ImportError as e:
        missing.append(f"torch ({e})")
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        missing.append(f"transformers ({e})")
    if missing:
        print("hf_generate_peer: this machine lacks " + " and ".join(missing) +
              "; install them (pip install torch transformers) on the machine that runs the comparison",
              file=sys.stderr)
        sys.exit(2)
    import torch
    import transformers
    return torch, transformers


def main(argv):
    a = parse_args(argv)
    try:  # read before the (slow) imports, so that a bad path fails at once
        with open(a.model_config) as f:
            config_json = json.load(f)
        if not isinstance(config_json, dict) or not isinstance(config_json.get("model_type"), str):
            raise ValueError("no \"model_type\" string")
    except (OSError, ValueError) as e:
        print(f"hf_generate_peer: --model-config {a.model_config}: {e}", file=sys.stderr)
        return 2
    torch, transformers = load_libraries()
    if a.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif a.device == "cuda" and not torch.cuda.is_available():
        print("hf_generate_peer: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    else:
        device = a.device
    dtype_name = a.dtype or ("bfloat16" if device == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)

    fields = {k: v for k, v in config_json.items() if k not in ("architectures", "model_type", "torch_dtype")}
    config = transformers.AutoConfig.for_model(config_json["model_type"], **fields)
    if a.prompt_tokens + a.new_tokens > getattr(config, "max_position_embeddings", MAX_TOKENS * 2):
        print(f"hf_generate_peer: --prompt-tokens + --new-tokens = {a.prompt_tokens + a.new_tokens} exceeds "
              f"{a.model_config}'s max_position_embeddings = {config.max_position_embeddings}", file=sys.stderr)
        return 2
    torch.manual_seed(a.seed)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype).to(device).eval()
    parameters = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(a.seed)
    prompts = torch.randint(0, config.vocab_size, (max(a.batch), a.prompt_tokens), generator=gen)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    sampling = {"do_sample": a.temperature > 0}
    if a.temperature > 0:
        sampling.update(temperature=a.temperature, top_p=1.0, top_k=0)

    report = {
        "peer": "hf_transformers", "transformers_version": transformers.__version__,
        "torch_version": torch.__version__, "model_config": a.model_config,
        "model_type": config_json["model_type"], "parameters": parameters, "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else None, "dtype": dtype_name,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens, "temperature": a.temperature,
        "seed": a.seed, "repeats": a.repeats, "threads": torch.get_num_threads(), "runs": []}
    runs = report["runs"]
    # Every batch of one cache implementation before the next (the default, dynamic, first), and after each
    # run the report so far on stderr ("partial": true), so that a run cut short by a time limit still left
    # its finished runs in the log (bench/gpu_check.sh keeps stdout and stderr in one file).
    for cache in a.cache_implementation:
        for batch in a.batch:
            ids = prompts[:batch].to(device)
            mask = torch.ones_like(ids)
            run = {"batch": batch, "cache_implementation": cache, "tokens_per_s": 0.0, "wall_s": 0.0,
                   "wall_s_each": [], "new_tokens": 0, "error": None}
            kwargs = dict(attention_mask=mask, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                          pad_token_id=0, **sampling)
            if cache != "dynamic":
                kwargs["cache_implementation"] = cache
            try:
                with torch.inference_mode():
                    torch.manual_seed(a.seed)
                    model.generate(ids, **kwargs)  # warm-up: allocator, kernels, the static cache
                    walls = []
                    for _ in range(a.repeats):
                        torch.manual_seed(a.seed)
                        sync()
                        t0 = time.perf_counter()
                        out = model.generate(ids, **kwargs)
                        sync()
                        walls.append(time.perf_counter() - t0)
                new = int(out.shape[1]) - a.prompt_tokens
                if new != a.new_tokens:
                    raise RuntimeError(f"generate returned {new} new tokens per row, not {a.new_tokens}")
                wall = sorted(walls)[len(walls) // 2]
                run.update(tokens_per_s=batch * a.new_tokens / wall, wall_s=wall, wall_s_each=walls,
                           new_tokens=batch * new)
            except Exception as e:  # noqa: BLE001 - recorded, the other runs go on
                run["error"] = f"{type(e).__name__}: {e}"[:2000]
                if device == "cuda":
                    torch.cuda.empty_cache()
            runs.append(run)
            print(json.dumps(dict(report, partial=True)), file=sys.stderr, flush=True)

    print(json.dumps(report), flush=True)
    # A failing static cache is a finding, not a failure of the comparison; a failing default cache is.
    return 0 if all(r["error"] is None for r in runs if r["cache_implementation"] == "dynamic") and \
        any(r["error"] is None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
