"""The fused query/key/value projection: same outputs and gradients as Hugging Face's three linears."""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForSequenceClassification

from bertkit.cpu.dropout import fast_dropout
from bertkit.cpu.fused_qkv import CALLS, fuse_qkv, unfuse_qkv


def _loss_and_grads(model, ids, mask, labels):
    model.zero_grad()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_fused_matches_unfused_outputs_and_gradients(tiny_bert):
    torch.manual_seed(0)
    reference = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).eval()
    fused = fuse_qkv(copy.deepcopy(reference))
    ids = torch.randint(1000, 5000, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # padding, so the attention mask matters
    labels = torch.tensor([0, 1, 1])
    for attn in ("sdpa", "eager"):
        reference.config._attn_implementation = fused.config._attn_implementation = attn
        loss_ref, grads_ref = _loss_and_grads(reference, ids, mask, labels)
        calls = CALLS["fused_qkv"]
        loss_fused, grads_fused = _loss_and_grads(fused, ids, mask, labels)
        assert CALLS["fused_qkv"] - calls == fused.config.num_hidden_layers  # the fused forward really ran
        torch.testing.assert_close(loss_fused, loss_ref, atol=1e-6, rtol=1e-5)
        assert grads_fused.keys() == grads_ref.keys()  # query, key and value each still get their own gradient
        for name, grad in grads_ref.items():
            torch.testing.assert_close(grads_fused[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    # Weights are the same parameters: the state dict is unchanged, and unfusing restores the library's forward
    assert fused.state_dict().keys() == reference.state_dict().keys()
    unfuse_qkv(fused)
    assert all("forward" not in m.__dict__ for m in fused.modules())


def test_fused_with_fast_dropout_and_bf16_autocast(tiny_bert):
    """Training set-up as in bertkit's loop: fast dropout's attention, bf16 autocast; nothing drops here."""
    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2,
                                                              hidden_dropout_prob=0.0,
                                                              attention_probs_dropout_prob=0.0)
    reference, fused = fast_dropout(copy.deepcopy(base)).train(), fuse_qkv(fast_dropout(copy.deepcopy(base))).train()
    ids = torch.randint(1000, 5000, (4, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    labels = torch.tensor([0, 1, 0, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_ref, grads_ref = _loss_and_grads(reference, ids, mask, labels)
        loss_fused, grads_fused = _loss_and_grads(fused, ids, mask, labels)
    torch.testing.assert_close(loss_fused, loss_ref, atol=1e-2, rtol=1e-2)  # bf16: matmul blocking may differ
    scale = max(g.abs().max().item() for g in grads_ref.values())
    for name, grad in grads_ref.items():  # the key bias's true gradient is 0 (softmax ignores it): noise both ways
        error = (grads_fused[name] - grad).norm().item()
        assert error <= 0.05 * grad.norm().item() + 1e-3 * scale, name


def test_trainer_fuses_while_training_and_restores_after(tiny_bert, sst2_dir, tmp_path):
    from .test_contract import fit, small_config

    def fused_layers(trainer, state):  # per step: (self-attention layers, how many of them run the fused forward)
        layers = [m for m in trainer.model.modules() if type(m).__name__ == "BertSelfAttention"]
        seen.append((len(layers), sum("forward" in m.__dict__ for m in layers)))

    seen = []
    adapter, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", epochs=1), callbacks=[fused_layers])
    assert seen and all(step == (2, 2) for step in seen)  # both layers fused during training (the default)
    assert not any("forward" in m.__dict__ for m in adapter.model.modules())  # the library's forward again
