"""The one comparison's rules (deform_onnx.proof.compare), each shown refusing what it must and passing the rest.

Arrays are built here so that each rule is the only one that can decide: the runners' own faults are
tests/proof/test_planted_faults.py.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from deform_onnx.exporting import verification
from deform_onnx.proof import compare
from deform_onnx.proof.compare import compare_outputs, tolerance_for

RNG = np.random.default_rng(0)


def _pair(a: np.ndarray, b: np.ndarray, **kw) -> compare.Comparison:
    return compare_outputs([("o", a)], [("o", b)], runtime="rt (1.0)", **kw)


def test_verification_reexports_the_one_rule() -> None:
    """Other engineers import the tolerances from exporting.verification: the same objects as proof.compare's."""
    assert verification.Tolerance is compare.Tolerance and verification.tolerance_for is compare.tolerance_for
    assert verification.DEFAULT_TOLERANCES is compare.DEFAULT_TOLERANCES
    assert verification._within is compare.within


@pytest.mark.parametrize(("dtype", "rule"), [("float64", 1e-8), ("float32", 1e-4), ("float16", 1e-2),
                                             ("bfloat16", 8e-2), ("int64", 0.0), ("bool", 0.0)])  # fmt: skip
def test_dtype_rules(dtype: str, rule: float) -> None:
    tol = tolerance_for(dtype)
    assert (tol.rtol, tol.atol, tol.explicit) == (rule, rule, False)
    given = tolerance_for(dtype, rtol=1e-3)
    assert (given.rtol, given.atol, given.explicit) == (1e-3, rule, True)


def test_per_element_not_whole_output() -> None:
    """Small elements 0.5 off next to large ones: refused with rtol 1e-3 (a bound of rtol * max|ref| is ~1)."""
    ref = np.concatenate([np.full(8, 1000.0), RNG.standard_normal(8)]).astype(np.float32)
    got = ref.copy()
    got[8:] += 0.5
    assert 1e-4 + 1e-3 * np.abs(ref).max() >= 0.5  # the rule this replaces would pass it
    result = _pair(got, ref, rtol=1e-3)
    (bad,) = result.failures
    assert bad.mismatched == 8 and bad.worst is not None and bad.worst[0] >= 8
    assert result.message().startswith("rt (1.0): output 'o' misses the reference at 8 of 16 elements")
    got[8:] = ref[8:] + 1e-5  # within 1e-4 + 1e-3 |ref| everywhere
    assert _pair(got, ref, rtol=1e-3).ok


def test_integers_exact_and_float64_tight() -> None:
    ref = np.arange(12, dtype=np.int64)
    off = ref.copy()
    off[7] += 1
    assert _pair(ref.copy(), ref).ok and not _pair(off, ref).ok
    assert _pair(off, ref).failures[0].worst == (7,)
    r64 = RNG.standard_normal(10)
    assert _pair(r64 + 1e-9, r64).ok
    assert not _pair(r64.astype(np.float32).astype(np.float64), r64).ok  # a float32 cast hidden in a float64 output


def test_precision_drop_shape_count_and_nan() -> None:
    ref = RNG.standard_normal((2, 3)).astype(np.float32)
    drop = _pair(ref.astype(np.float16), ref)
    assert not drop.ok and "is float16 where the reference is float32 (a precision drop" in drop.message()
    assert not _pair(ref.astype(ml_dtypes.bfloat16), ref.astype(np.float16)).ok
    assert _pair(ref.astype(np.float16), ref.astype(np.float16)).ok
    assert "has shape (3, 2), the reference (2, 3)" in _pair(ref.T.copy(), ref).message()
    count = compare_outputs([("o", ref)], [("o", ref), ("p", ref)], runtime="rt")
    assert not count.ok and math.isinf(count.max_error) and "returns 1 outputs, the reference 2" in count.message()
    nan = ref.copy()
    nan[0, 1] = np.nan
    assert _pair(nan, nan.copy()).ok  # NaN in both and equal infinities match
    bad = _pair(nan, ref)
    assert not bad.ok and bad.failures[0].nonfinite == 1 and "1 of them NaN/Inf" in bad.message()
    inf = np.array([np.inf, -np.inf, 1.0], np.float32)
    assert _pair(inf, inf.copy()).ok


def test_every_output_and_per_output_tolerances() -> None:
    """Each output on its own: the last one's fault is named, the first is not; a per-output tolerance wins."""
    a = RNG.standard_normal(6).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    result = compare_outputs([("a", a), ("b", b + 0.01)], [("a", a), ("b", b)], runtime="rt")
    assert [o.name for o in result.failures] == ["b"] and result.worst is not None and result.worst.name == "b"
    assert "output 'a'" not in result.message() and "rt: output 'b' misses" in result.message()
    loose = compare_outputs([("a", a), ("b", b + 0.01)], [("a", a), ("b", b)], runtime="rt",
                            per_output={"b": (None, 0.02)})  # fmt: skip
    assert loose.ok and loose.outputs[1].tolerance.atol == 0.02 and loose.outputs[0].tolerance.atol == 1e-4
