#!/usr/bin/env python3
"""Writes HF-reference fixtures for tests/model/test_parity.cpp (needs python3 with torch + transformers).

For each tiny random model (Llama and Qwen2, tied and untied embeddings, one Llama with llama3 rope
scaling) this saves, under OUT/<name>/:
  config.json, model.safetensors   save_pretrained(), weights in BF16
  reference.safetensors            input_ids I64 [B,T], attention_mask I64 [B,T] (row 1 left-padded),
                                   logits_fp32 F32 [B,T,V] (HF eager attention, FP32 compute),
                                   logits_bf16 F32 [B,T,V] (the same model in BF16)
Positions are passed explicitly as cumsum(mask) - 1, which is what pulse computes from the mask
(HF's forward would otherwise count padding slots as positions).

Usage: python3 tests/model/make_parity_fixtures.py ../shared/models/parity
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

COMMON = dict(vocab_size=211, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)

MODELS = {
    "llama_tied": (LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=True, rope_theta=10000.0)),
    "llama_untied_rope3": (LlamaConfig, LlamaForCausalLM, dict(
        tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=64))),
    "qwen2_tied": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, rope_theta=1000000.0)),
    "qwen2_untied": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=False, rope_theta=10000.0)),
}


def main(out_dir):
    torch.manual_seed(0)
    ids = torch.randint(3, COMMON["vocab_size"], (2, 17), dtype=torch.int64)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    ids[1, :5] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    for name, (cfg_cls, model_cls, extra) in MODELS.items():
        cfg = cfg_cls(**COMMON, **extra, attn_implementation="eager")
        model = model_cls(cfg).eval()
        # Larger-than-default weights so that logits are not all ~0 and differences show.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if p.dim() == 2 or pname.endswith(".bias"):
                    p.normal_(0, 0.1)
        model = model.to(torch.bfloat16)  # the weights both sides read are BF16 values
        path = os.path.join(out_dir, name)
        model.save_pretrained(path, safe_serialization=True)
        with torch.no_grad():
            fp32 = model.to(torch.float32)(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            bf16 = model.to(torch.bfloat16)(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        save_file({"input_ids": ids, "attention_mask": mask, "logits_fp32": fp32.contiguous(),
                   "logits_bf16": bf16.contiguous()}, os.path.join(path, "reference.safetensors"))
        print(name, "logits", tuple(fp32.shape), "max |fp32 - bf16|", (fp32 - bf16).abs().max().item())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "parity")
