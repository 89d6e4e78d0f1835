"""Each tiny Hugging Face detector config is written once, in tests/tiny_detectors.py (four copies of RT-DETR's
and two or three of Deformable DETR's, Mask2Former's, RF-DETR's and Grounding DINO's drifted apart before)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The config classes tiny_detectors.py builds; no other test or script calls them.
SHARED = {
    "RTDetrResNetConfig",
    "ResNetConfig",
    "DeformableDetrConfig",
    "Mask2FormerConfig",
    "RfDetrDinov2Config",
    "RfDetrConfig",
    "GroundingDinoConfig",
    "BertConfig",
}


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_configs_are_built_in_tiny_detectors_only():
    files = [*sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py"))]
    copies = {
        f"{p.relative_to(ROOT)}: {', '.join(sorted(found))}"
        for p in files
        if p.name != "tiny_detectors.py" and (found := _calls(p) & SHARED)
    }
    assert not copies, f"use tests/tiny_detectors.py instead of building these configs again: {sorted(copies)}"


def test_extra_fields_override_the_shared_ones():
    pytest.importorskip("transformers")
    import tiny_detectors

    assert tiny_detectors.deformable_detr_config(d_model=64).d_model == 64
    assert tiny_detectors.mask2former_config().num_queries == 10
    assert tiny_detectors.rf_detr_config(decoder_layers=1).decoder_layers == 1
    assert tiny_detectors.grounding_dino_config().max_text_len == 16
