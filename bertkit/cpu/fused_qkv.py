"""One matrix multiply for BERT's query, key and value projections while training.

Hugging Face's `BertSelfAttention` projects the hidden states three times (`query`, `key`, `value`: three
[hidden → hidden] linears). Under bf16 autocast each of the three casts the same fp32 input to bf16 on the way in
and its gradient back on the way out. `fuse_qkv(model)` makes each self-attention layer concatenate the three
weight matrices and run one [hidden → 3·hidden] linear instead: one input cast, one larger matmul (forward,
input gradient and weight gradient). The weights stay the three separate parameters (their gradients are slices
of the fused one), so state dicts, optimisers and saved files are unchanged; `unfuse_qkv(model)` undoes it.
The outputs and gradients match the unfused layer's (tests/test_fused_qkv.py). It needs the attention-interface
BERT of recent transformers (`BertSelfAttention.scaling` and `ALL_ATTENTION_FUNCTIONS`); `supported()` says whether
the installed one is such, and `CALLS` counts fused forwards so that a caller can check it took effect.
"""

from __future__ import annotations

import inspect
import types

import torch
from torch import nn

CALLS = {"fused_qkv": 0}


def _forward(self, hidden_states: torch.Tensor, attention_mask=None, past_key_values=None, **kwargs):
    if past_key_values is not None:  # decoder caching: keep the library's own path
        return type(self).forward(self, hidden_states, attention_mask, past_key_values, **kwargs)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    CALLS["fused_qkv"] += 1
    batch, seq = hidden_states.shape[:-1]
    heads, head = self.num_attention_heads, self.attention_head_size
    weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # [3·heads·head, hidden]
    bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])  # [3·heads·head]
    qkv = nn.functional.linear(hidden_states, weight, bias)  # [batch, seq, 3·heads·head]
    query, key, value = qkv.view(batch, seq, 3, heads, head).permute(2, 0, 3, 1, 4)  # 3 × [batch, heads, seq, head]
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
    out, weights = attention(self, query, key, value, attention_mask,
                             dropout=0.0 if not self.training else self.dropout.p, scaling=self.scaling, **kwargs)
    return out.reshape(batch, seq, -1).contiguous(), weights  # [batch, seq, heads·head]


def _self_attentions(model: nn.Module):
    from transformers.models.bert.modeling_bert import BertSelfAttention

    return [m for m in model.modules() if type(m) is BertSelfAttention]


def supported() -> bool:
    """Whether the installed transformers runs BERT attention through its attention interface (what `_forward`
    reproduces with one projection)."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: F401
        from transformers.models.bert import modeling_bert
    except ImportError:
        return False
    return hasattr(modeling_bert, "eager_attention_forward") and "scaling" in inspect.getsource(
        modeling_bert.BertSelfAttention.__init__)


def fuse_qkv(model: nn.Module) -> nn.Module:
    """Route every BERT self-attention layer of `model` through the fused projection. Returns the model."""
    for module in _self_attentions(model):
        module.forward = types.MethodType(_forward, module)
    return model


def unfuse_qkv(model: nn.Module) -> nn.Module:
    for module in _self_attentions(model):
        module.__dict__.pop("forward", None)
    return model
