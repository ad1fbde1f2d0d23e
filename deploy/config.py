"""Typed arguments of the Serve application (the ``args:`` block of a Serve config file).

``AppArgs`` is what ``deploy.app:build_app`` receives; ``Knobs`` is the engine deployment's
``user_config``, changed at run time (``serve deploy`` with a new ``user_config``) through
``reconfigure`` without restarting replicas. Both reject unknown fields and say why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActorResources(Strict):
    """Ray resources of one model actor (0 GPUs: it runs on the CPU)."""

    num_gpus: float = Field(default=0.0, ge=0)
    num_cpus: float = Field(default=0.0, ge=0)


class Knobs(Strict):
    """Runtime speculation settings (the engine deployment's ``user_config``)."""

    k_max: int = Field(default=4, ge=0,
                       description="draft tokens per request per step, <= max_k_max")
    adaptive: bool = True


class AppArgs(Strict):
    """Everything the application needs; defaults are the CPU demo (embedded pair)."""

    target: str = "embedded:smollm2-135m"
    draft: str | None = Field(default="quant:int8", description="draft spec (models.drafts); "
                              "None: no speculation")
    served_model_name: str | None = Field(default=None, description="the API's model id "
                                          "(default: the target spec)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_slots: int = Field(default=8, ge=1)
    max_seq_len: int = Field(default=512, ge=16)
    max_k_max: int = Field(default=8, ge=0,
                           description="ceiling of k_max (buffers are sized for it)")
    k_max: int = Field(default=4, ge=0)
    adaptive: bool = True
    sampler_backend: Literal["auto", "torch", "triton"] = "auto"
    cuda_graphs: bool = False
    api_key: str | None = None
    target_actor: ActorResources = ActorResources()
    draft_actor: ActorResources = ActorResources()
    torch_threads: int = Field(default=0, ge=0,
                               description="torch threads per model actor (0: torch's default)")

    @model_validator(mode="after")
    def _check(self) -> AppArgs:
        if self.k_max > self.max_k_max:
            raise ValueError(f"k_max={self.k_max} exceeds max_k_max={self.max_k_max}")
        return self

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.target

    @property
    def knobs(self) -> Knobs:
        return Knobs(k_max=self.k_max, adaptive=self.adaptive)
