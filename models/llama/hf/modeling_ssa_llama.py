"""A Llama with Selective Self-Attention (SSA) for Hugging Face transformers, as Kelvin trains it.

Written for Kelvin (models/llama/hf/); Kelvin copies this file into every SSA export, so that
AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True) builds the model Kelvin
trained. Tested with transformers 5.23.0 and torch 2.15.0 (tools/requirements.txt); it subclasses
transformers' Llama classes and changes only the attention's queries and values.

The temperatures follow the Kelvin project's SSA specification, per token t, query head h and
key/value head g, with u = W_q x before RoPE and p_t the position id the model is given:
    tau^q[t, h] = tanh(a^q_h . GeLU(u[t, h])) + 1 + sigmoid(alpha_h) ln(p_t + 1)
    tau^v[t, g] = tanh(a^v_g . GeLU(v[t, g])) + 1
    q~ = tau^q RoPE(u),  k~ = RoPE(k),  v~ = tau^v v,  attention as Llama's on (q~, k~, v~)
RoPE is transformers' own rotary embedding, which LlamaModel builds from the config's
rope_parameters (rope_scaling in transformers 4's form): every scaling transformers has, whose
cos and sin carry the scaling's attention factor m (yarn's, longrope's; 1 otherwise). So the
factors compose by multiplication: q~ = tau^q m R(u) and k~ = m R(k), the logits are
tau^q m^2 (R(u) . R(k)) / sqrt(d); tau^q's position term uses the raw position id, never the scaled
frequencies. Kelvin computes the same (its attention operator scales cos and sin by m).
GeLU is the exact erf form. Flags (config.ssa): a temperature that is off is 1; token_aware off
drops the tanh terms; position_aware off drops the sigmoid(alpha) term; weight_sharing off reads
the tanh terms from separate per-head projections (query_temperature_proj, value_temperature_proj)
instead of u and v; temperature_clamp clamps every temperature that is on (torch.clamp).

Position ids are the model's: packed documents whose positions restart get their own position
terms, and left-padded batches in generate() get the positions transformers derives from the
attention mask. The KV cache holds k~ (after RoPE) and v~ (after tau^v), so each new token needs
only its own query temperature, from its own u and position. The temperatures are computed in
float32 whatever the model's dtype, as Kelvin's GPU kernel does.
"""
import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.models.llama.modeling_llama import (
    ALL_ATTENTION_FUNCTIONS,
    LlamaAttention,
    LlamaForCausalLM,
    LlamaModel,
    LlamaPreTrainedModel,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

try:  # Kelvin's exports ship both files side by side
    from .configuration_ssa_llama import SsaLlamaConfig
except ImportError:
    from configuration_ssa_llama import SsaLlamaConfig


class SsaTemperatures(nn.Module):
    """The SSA parameters of one layer (Kelvin's names, model.layers.N.self_attn.ssa.*):
    query_readout [H, d] and alpha [H] with the query temperature, value_readout [G, d] with the
    value temperature, and without weight sharing (token_aware on) the projections
    query_temperature_proj [H*d, D] and value_temperature_proj [G*d, D]."""

    def __init__(self, config):
        super().__init__()
        s = config.ssa
        self.settings = s
        heads, kv_heads, head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                     config.head_dim)
        own_projection = not s["weight_sharing"] and s["token_aware"]
        if s["query_temperature"]:
            self.query_readout = nn.Parameter(torch.zeros(heads, head_dim))
            self.alpha = nn.Parameter(torch.full((heads,), float(s["alpha_init"])))
            if own_projection:
                self.query_temperature_proj = nn.Linear(config.hidden_size, heads * head_dim,
                                                        bias=False)
        if s["value_temperature"]:
            self.value_readout = nn.Parameter(torch.zeros(kv_heads, head_dim))
            if own_projection:
                self.value_temperature_proj = nn.Linear(config.hidden_size, kv_heads * head_dim,
                                                        bias=False)

    def _token_term(self, source, readout):
        """tanh(a . GeLU(source)): source [B, K, T, d], readout [K, d] -> [B, K, T] (float32)."""
        z = (F.gelu(source.float()) * readout.float()[None, :, None, :]).sum(-1)
        return torch.tanh(z)

    def _finish(self, tau):
        clamp = self.settings["temperature_clamp"]
        return tau if clamp is None else torch.clamp(tau, clamp["lo"], clamp["hi"])

    def _source(self, projection, hidden_states, projected, head_dim):
        """The token term's input [B, K, T, d]: the attention's own u or v, or W_tmp x."""
        if projection is None:
            return projected
        batch, seq = hidden_states.shape[:2]
        return projection(hidden_states).view(batch, seq, -1, head_dim).transpose(1, 2)

    def _one_plus_token_term(self, hidden_states, states, projection_name, readout):
        """1 + tanh(a . GeLU(source)) [B, K, T] (float32; 1 alone with token_aware off)."""
        batch, heads, seq, head_dim = states.shape
        tau = torch.ones(batch, heads, seq, device=states.device, dtype=torch.float32)
        if self.settings["token_aware"]:
            source = self._source(getattr(self, projection_name, None), hidden_states, states,
                                  head_dim)
            tau = tau + self._token_term(source, readout)
        return tau

    def query(self, hidden_states, u, position_ids):
        """tau^q [B, H, T, 1] (float32) from u [B, H, T, d] and position ids [B or 1, T]; None
        when the query temperature is off."""
        if not self.settings["query_temperature"]:
            return None
        tau = self._one_plus_token_term(hidden_states, u, "query_temperature_proj",
                                        self.query_readout)
        if self.settings["position_aware"]:
            log_n = torch.log(position_ids.to(torch.float32) + 1)  # [B or 1, T]
            tau = tau + torch.sigmoid(self.alpha.float())[None, :, None] * log_n[:, None, :]
        return self._finish(tau)[..., None]

    def value(self, hidden_states, v):
        """tau^v [B, G, T, 1] (float32) from v [B, G, T, d]; None when the value temperature is
        off."""
        if not self.settings["value_temperature"]:
            return None
        tau = self._one_plus_token_term(hidden_states, v, "value_temperature_proj",
                                        self.value_readout)
        return self._finish(tau)[..., None]


def _scaled(states, tau):
    """states * tau in float32, back in the states' dtype (tau None: states as they are)."""
    return states if tau is None else (states.float() * tau).to(states.dtype)


class SsaLlamaAttention(LlamaAttention):
    """Llama's attention with SSA's query and value temperatures (module docstring)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.ssa = SsaTemperatures(config)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None,
                past_key_values=None, **kwargs):
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            raise ValueError("SSA's query temperature needs the position ids; "
                             "SsaLlamaModel passes them to every layer")
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        u = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)        # [B, H, T, d]
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # [B, G, T, d]
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)        # [B, G, T, d]
        tau_q = self.ssa.query(hidden_states, u, position_ids)
        tau_v = self.ssa.value(hidden_states, v)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(u, key_states, cos, sin)
        query_states = _scaled(query_states, tau_q)
        value_states = _scaled(v, tau_v)

        if past_key_values is not None:  # the cache holds k~ and v~
            key_states, value_states = past_key_values.update(key_states, value_states,
                                                              self.layer_idx)

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward)
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling, **kwargs)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class SsaLlamaPreTrainedModel(LlamaPreTrainedModel):
    config_class = SsaLlamaConfig
    config: SsaLlamaConfig

    def _init_weights(self, module):
        """SSA starts as the pretrained model: read-outs 0 (so tanh(z) = 0), alpha alpha_init.
        The separate temperature projections get Linear's usual initialisation (Kelvin starts
        them as copies of W_q and W_v)."""
        super()._init_weights(module)
        if isinstance(module, SsaTemperatures):
            for name in ("query_readout", "value_readout"):
                if hasattr(module, name):
                    init.zeros_(getattr(module, name))
            if hasattr(module, "alpha"):
                init.constant_(module.alpha, float(module.settings["alpha_init"]))


class SsaLlamaModel(SsaLlamaPreTrainedModel, LlamaModel):
    def __init__(self, config):
        super().__init__(config)
        for index, layer in enumerate(self.layers):
            layer.self_attn = SsaLlamaAttention(config, index)
        self.post_init()


class SsaLlamaForCausalLM(SsaLlamaPreTrainedModel, LlamaForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.model = SsaLlamaModel(config)
        self.post_init()


__all__ = ["SsaLlamaForCausalLM", "SsaLlamaModel", "SsaLlamaPreTrainedModel"]
