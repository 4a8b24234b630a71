"""The workloads build and run on the CPU, with the parameter counts of the seed tables."""

from __future__ import annotations

import importlib.util

import pytest

# torch is imported by the tests that use it, not at collection (about 2.5 CPU s in every worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@pytest.fixture(scope="module")
def lm():
    from kview.models import transformer_lm

    return transformer_lm


@pytest.mark.parametrize(
    "size,expected",
    [
        ("small", 128_625_408),
        ("2.7B", 3_406_809_600),
        ("medium", 423_183_360),
        ("large", 969_411_840),
        ("xl", 1_998_235_200),
    ],
)
def test_parameter_count_formula_matches_seed_table(lm, size, expected):
    assert lm.parameter_count(lm.SIZES[size]) == expected


def test_tiny_model_has_the_formula_count_and_trains_a_step(lm):
    import torch

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
    assert (
        workload.main(
            [
                "--size",
                "tiny",
                "--ctx",
                "16",
                "--mode",
                "train",
                "--warmup",
                "0",
                "--steps",
                "1",
                "--kineto-json",
                str(out),
            ]
        )
        == 0
    )
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    expected = {
        "profiled_step",
        "forward_pass",
        "backward_pass",
        "optimizer_step",
        "layer_0",
        "layer_1",
        "attention_sublayer",
        "ffn_sublayer",
        "scaled_dot_product_attention",
        "computing attention scores",
        "computing softmax",
        "final matmul",
        "rope encoding",
        "token_embeddings",
        "final_norm",
        "lm_head",
    }
    assert expected <= names


def test_bert_dlrm_ncf_counts_match_the_notes_and_the_built_modules():
    from kview.models import bert, dlrm, ncf

    # Full sizes by formula against the reference counts (shared/notes/capture.md §2).
    assert bert.parameter_count(bert.BertConfig(vocab_size=30522, layers=24)) == 336_226_108  # "336.2M with heads"
    assert dlrm.parameter_count()["bottom"] == 171_392
    assert dlrm.parameter_count()["top"] == 2_198_529
    assert dlrm.parameter_count([100_000] * 26)["embeddings"] == 332_800_000  # "332.8M"
    p = ncf.parameter_count()
    assert (p["mlp"], p["final"]) == (106_944, 129) and round(p["embeddings"] / 1e6, 2) == 31.73
    # Small instances: the built modules have exactly the formula's counts.
    small = bert.BertConfig(layers=1, vocab_size=1000)
    assert sum(x.numel() for x in bert.BertForPreTraining(small).parameters()) == bert.parameter_count(small)
    d = dlrm.DLRM(tables=[50, 60, 70])
    want = dlrm.parameter_count([50, 60, 70])
    assert sum(x.numel() for x in d.parameters()) == sum(want.values())
    n = ncf.NeuMF(users=30, items=40)
    assert sum(x.numel() for x in n.parameters()) == sum(ncf.parameter_count(30, 40).values())


@pytest.mark.parametrize(
    "model,args",
    [
        ("bert", ["--layers", "1", "--ctx", "16", "--batch", "2"]),
        pytest.param("dlrm", ["--batch", "64"], marks=pytest.mark.nightly),  # its full-size tables: slow on a CPU
        ("ncf", ["--batch", "256"]),
    ],
)
def test_workloads_train_a_step_on_cpu(model, args, tmp_path):
    import json

    from kview.capture import workload

    out = tmp_path / "t.json"
    assert (
        workload.main(
            ["--model", model, *args, "--mode", "train", "--warmup", "0", "--steps", "1", "--kineto-json", str(out)]
        )
        == 0
    )
    names = {e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "user_annotation"}
    expected = {
        "bert": {"Enc_0", "Attn", "SelfAttn", "Q_Proj", "FFN", "Embedding", "NSP", "Masked_LM"},
        "dlrm": {"Bottom_MLP", "Embedding_0", "Embedding_25", "Interaction", "Top_MLP"},
        "ncf": {"MF_User_Embedding", "MF_Item_Embedding", "MLP_User_Embedding", "MLP_0", "NeuMF_MLP"},
    }[model]
    assert expected | {"forward_pass", "backward_pass", "optimizer_step"} <= names
