from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
PUBLIC = ROOT.parent / "shared" / "fixtures" / "public"
GOLDEN_PUBLIC = ROOT / "tests" / "golden" / "public"

LM_TRACES = sorted(SAMPLES.glob("*_nsys.sqlite"))
TORCH_TRACES = sorted(SAMPLES.glob("*_torch.sqlite"))
PUBLIC_TRACES = sorted(PUBLIC.glob("*.sqlite"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache dir, so tests never share or pollute ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
