"""The configuration of a Llama with Selective Self-Attention (SSA), as Kelvin exports it.

Written for Kelvin (models/llama/hf/); Kelvin copies this file into every SSA export. Tested with
transformers 5.23.0 and torch 2.15.0 (tools/requirements.txt).

config.json holds the plain Llama settings plus an "ssa" object with Kelvin's SSA flags:
query_temperature, value_temperature, token_aware, position_aware, weight_sharing (booleans),
temperature_clamp ({"lo": .., "hi": ..} or null), and the training settings alpha_init and
temperature_lr_scale (recorded for the record; inference does not use them).
"""
from huggingface_hub.dataclasses import strict
from transformers.models.llama.configuration_llama import LlamaConfig

SSA_DEFAULTS = {
    "query_temperature": True,
    "value_temperature": True,
    "token_aware": True,
    "position_aware": True,
    "weight_sharing": True,
    "temperature_clamp": None,
    "alpha_init": -8.0,
    "temperature_lr_scale": 1.0,
}


def resolved_ssa_settings(ssa):
    """The SSA settings with defaults filled in; an unknown key is an error naming it."""
    ssa = dict(ssa or {})
    unknown = sorted(set(ssa) - set(SSA_DEFAULTS))
    if unknown:
        raise ValueError(f"config.json \"ssa\" has unknown settings {unknown}; "
                         f"known: {sorted(SSA_DEFAULTS)}")
    settings = {**SSA_DEFAULTS, **ssa}
    clamp = settings["temperature_clamp"]
    if clamp is not None and not (0 < clamp["lo"] < clamp["hi"]):
        raise ValueError(f"config.json \"ssa\".temperature_clamp {clamp} needs 0 < lo < hi")
    return settings


@strict
class SsaLlamaConfig(LlamaConfig):
    model_type = "ssa_llama"

    ssa: dict | None = None

    def __post_init__(self, **kwargs):
        self.ssa = resolved_ssa_settings(self.ssa)
        super().__post_init__(**kwargs)


__all__ = ["SsaLlamaConfig"]
