"""The workloads build and run on the CPU, with the parameter counts of the seed tables."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kview.models import transformer_lm as lm  # noqa: E402


@pytest.mark.parametrize("size,expected", [("small", 128_625_408), ("2.7B", 3_406_809_600),
                                           ("medium", 423_183_360), ("large", 969_411_840), ("xl", 1_998_235_200)])
def test_parameter_count_formula_matches_seed_table(size, expected):
    assert lm.parameter_count(lm.SIZES[size]) == expected


def test_tiny_model_has_the_formula_count_and_trains_a_step():
    torch.manual_seed(0)
    model = lm.build("tiny", context_length=16)
    assert sum(p.numel() for p in model.parameters()) == lm.parameter_count(model.cfg)
    ids, targets = lm.random_batch(model.cfg, batch=2)
    logits = model(ids)
    assert logits.shape == (2, 16, lm.VOCAB_SIZE)
    loss = lm.cross_entropy(logits, targets)
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, lm.VOCAB_SIZE), targets.reshape(-1))
    assert torch.allclose(loss, ref, atol=1e-5)
    loss.backward()
    assert model.lm_head.weight.grad is not None


def test_cpu_capture_records_the_seed_range_names(tmp_path):
    import json

    from kview.capture import workload

    out = tmp_path / "t.json"
    assert workload.main(["--size", "tiny", "--ctx", "16", "--mode", "train", "--warmup", "0",
                          "--steps", "1", "--kineto-json", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    expected = {"profiled_step", "forward_pass", "backward_pass", "optimizer_step", "layer_0", "layer_1",
                "attention_sublayer", "ffn_sublayer", "scaled_dot_product_attention", "computing attention scores",
                "computing softmax", "final matmul", "rope encoding", "token_embeddings", "final_norm", "lm_head"}
    assert expected <= names
