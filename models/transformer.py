"""A decoder-only transformer with a slot-indexed static KV cache (gpt-fast style).

Covers the Llama family (SmolLM2), Mistral (sliding-window layers), Qwen2 (q/k/v bias) and
Qwen3 (per-head RMSNorm on q and k). Parameter names mirror transformers' so a Hugging Face
model's ``state_dict`` loads as it is, sharing storage (no copy).

Shapes: ``tokens [B, T] int64``, ``slots [B] int64`` (rows of the cache), ``positions [B]
int64`` (absolute position of each row's first token). The cache is
``[num_slots, kv_heads, max_seq_len, head_dim]`` per layer; a step writes its T new keys and
values at ``positions[b] + t`` and attends to every cached key at a position <= the query's
(and within the sliding window). Entries past a row's length are never read, which is what
makes rollback free: the runner simply lowers the length. All shapes are static for a
given (B, T), so the forward is CUDA-graph capturable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class ArchConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    qkv_bias: bool
    qk_norm: bool
    sliding_windows: tuple[int | None, ...]

    @classmethod
    def from_hf(cls, config) -> ArchConfig:
        mt = config.model_type
        if mt not in SUPPORTED:
            raise ValueError(f"unsupported architecture {mt!r}; supported: {', '.join(SUPPORTED)}")
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        n = config.num_hidden_layers
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None:
            windows = tuple(window if t == "sliding_attention" else None for t in layer_types)
        elif mt == "mistral" or (mt == "qwen2" and getattr(config, "use_sliding_window", False)):
            windows = (window,) * n
        else:
            windows = (None,) * n
        bias = getattr(config, "attention_bias", mt == "qwen2")
        return cls(mt, config.vocab_size, config.hidden_size, config.intermediate_size, n,
                   heads, config.num_key_value_heads, head_dim, config.rms_norm_eps,
                   bool(bias), mt == "qwen3", windows)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ArchConfig, layer: int):
        super().__init__()
        h, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.heads, self.kv_heads, self.head_dim = h, kv, d
        self.qk_norm = cfg.qk_norm
        self.window = cfg.sliding_windows[layer]

    def forward(self, x, cos, sin, cache: tuple[torch.Tensor, torch.Tensor], slots, key_pos,
                mask) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache, v_cache = cache
        rows = slots[:, None].expand(b, t)
        k_cache[rows, :, key_pos] = k.to(k_cache.dtype)
        v_cache[rows, :, key_pos] = v.to(v_cache.dtype)
        keys, values = k_cache[slots], v_cache[slots]  # [B, kv, S, D]
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=mask[self.window], enable_gqa=True
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ArchConfig, layer: int):
        super().__init__()
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache, slots, key_pos, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, slots, key_pos, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    """The forward pass; the KV cache is passed in (owned by ``ModelRunner``)."""

    def __init__(self, cfg: ArchConfig, inv_freq: torch.Tensor, rope_scale: float = 1.0):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.rope_scale = rope_scale

    def rope(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for absolute positions ``pos [B, T]`` -> ``[B, T, 1, D]``."""
        freqs = pos[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
        return (emb.cos() * self.rope_scale).to(dtype), (emb.sin() * self.rope_scale).to(dtype)

    def forward(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``tokens [B, T]`` at ``positions[b] + t`` -> logits ``[B, T, V]`` (model dtype)."""
        b, t = tokens.shape
        max_len = caches[0][0].shape[2]
        query_pos = positions[:, None] + torch.arange(t, device=tokens.device)  # [B, T]
        key_pos = query_pos.clamp(max=max_len - 1)
        x = self.model.embed_tokens(tokens)
        cos, sin = self.rope(query_pos, x.dtype)
        key_idx = torch.arange(max_len, device=tokens.device)
        delta = query_pos[:, None, :, None] - key_idx  # [B, 1, T, S]: query minus key position
        masks = {w: (delta >= 0) & (delta < w) if w else delta >= 0
                 for w in set(self.cfg.sliding_windows)}
        for layer, cache in zip(self.model.layers, caches):
            x = layer(x, cos, sin, cache, slots, key_pos, masks)
        return self.lm_head(self.model.norm(x))


def from_hf(hf_model, num_layers: int | None = None) -> CausalLM:
    """Wrap a transformers causal LM, sharing its parameters (no copy).

    ``num_layers`` < the model's depth gives an early-exit model (first N layers + final
    norm + LM head) that still shares the weights.
    """
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = ArchConfig.from_hf(hf_model.config)
    if num_layers is not None:
        if not 1 <= num_layers <= cfg.num_layers:
            raise ValueError(f"early-exit depth must be in 1..{cfg.num_layers}, got {num_layers}")
        cfg = ArchConfig(**{**cfg.__dict__, "num_layers": num_layers,
                            "sliding_windows": cfg.sliding_windows[:num_layers]})
    rope = getattr(hf_model.config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    if rope_type == "default":
        base = rope.get("rope_theta", getattr(hf_model.config, "rope_theta", 10000.0))
        d = cfg.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        scale = 1.0
    else:
        inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](hf_model.config, "cpu")
    with torch.device("meta"):
        lm = CausalLM(cfg, torch.zeros(cfg.head_dim // 2), float(scale))
    state = dict(hf_model.state_dict())
    if "lm_head.weight" not in state:  # tied embeddings
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    state = {k: v for k, v in state.items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < cfg.num_layers}
    lm.load_state_dict(state, strict=True, assign=True)
    device = state["model.embed_tokens.weight"].device
    lm.inv_freq = inv_freq.float().to(device)
    return lm.eval()
