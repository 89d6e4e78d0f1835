"""Each verification rule refuses a fault just outside it and passes one just inside (issue 32, item 4).

The file is the real export; the fault is planted in what the runtime returns (one element set to a value
computed here from PyTorch's output, so its distance to the rule's bound is known: 0.95x and 1.05x).
The float64 rule (FLOAT64_FACTOR) and a given tolerance on an ill-conditioned float32 model are in
test_reference_trust.py (the TPS layer); integer exactness in test_verify_float32_copy.py.
"""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import VerificationError
from deform_onnx.exporting.verification import DEFAULT_TOLERANCES, verify
from util import SMALL, DeformLayer, Planted, make_inputs

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def dcn():
    """SMALL's DCNv2 layer in float32, its inputs, its file (default arguments) and PyTorch's output."""
    layer, inputs = DeformLayer(SMALL), make_inputs(SMALL)
    args = tuple(inputs.values())
    buf = io.BytesIO()
    deform_onnx.export(layer, args, buf)
    with torch.no_grad():
        want = layer(*args).numpy().astype(np.float64)
    return layer, args, buf.getvalue(), want


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_float32_tolerance(dcn, factor):
    """``|file - torch| <= 1e-4 + 1e-4 |torch|``: 0.95x of it at the largest output passes, 1.05x is refused
    (the float64 rule does not rescue it: PyTorch float32 is within ~1e-6 of float64 on this layer)."""
    layer, args, data, want = dcn
    at = int(np.abs(want).argmax())
    rtol, atol = DEFAULT_TOLERANCES["float32"]
    bound = atol + rtol * abs(want.flat[at])
    session = Planted(data, at, np.float32(want.flat[at] + factor * bound))
    if factor < 1:
        verified = verify(layer, args, data, session=session)
        (check,) = verified.checks.values()
        assert check.reference == "pytorch" and "float32 default tolerance" in check.rule
        assert check.error == pytest.approx(factor * bound, rel=1e-2)  # the planted element is the worst
        return
    with pytest.raises(VerificationError, match=r"against the model run in float64 the file is off by"):
        verify(layer, args, data, session=session)


class Twice(torch.nn.Module):
    def forward(self, x):
        return 2 * x  # exact in float16: PyTorch's own float16 output is the float32 copy's


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_float16_tolerance(factor):
    """``|file - float32 copy| <= 1e-2 + 1e-2 |ref|`` where PyTorch float16 is exact (so "as close as PyTorch"
    cannot pass it): 0.95x of the bound at the output nearest 0 (where float16 resolves 1e-2 finely) passes,
    1.05x is refused."""
    model = Twice().half().eval()
    x = torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)).half()
    buf = io.BytesIO()
    deform_onnx.export(model, (x,), buf)
    ref = (2 * x.double()).numpy()
    at = int(np.abs(ref).argmin())
    rtol, atol = DEFAULT_TOLERANCES["float16"]
    bound = atol + rtol * abs(ref.flat[at])
    value = np.float16(ref.flat[at] + factor * bound)
    assert abs(abs(float(value) - ref.flat[at]) / bound - factor) < 0.01, "premise: float16 holds the planted value"
    session = Planted(buf.getvalue(), at, value)
    if factor < 1:
        (check,) = verify(model, (x,), buf.getvalue(), session=session).checks.values()
        assert check.reference == "float32 copy" and "float16 default tolerance" in check.rule
        assert check.pytorch_error == 0.0
        return
    with pytest.raises(VerificationError, match=r"differs from the float32 model: max abs error"):
        verify(model, (x,), buf.getvalue(), session=session)


class Shift(torch.nn.Module):
    """``(x + 100) - 100``: exact in float32, while PyTorch float16 rounds ``x + 100`` to a multiple of
    1/32 (ulp(100) in float16 is 1/16): its own error is 0.031, beyond the float16 tolerance near 0."""

    def forward(self, x):
        return (x + 100.0) - 100.0


@pytest.fixture(scope="module")
def shift():
    model = Shift().half().eval()
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0)).half()
    buf = io.BytesIO()
    deform_onnx.export(model, (x,), buf)
    ref = copy.deepcopy(model).float()(x.float()).numpy().astype(np.float64)  # the float32 copy
    torch_err = float(np.abs(model(x).numpy().astype(np.float64) - ref).max())
    at = int(np.abs(ref).argmin())  # where the float16 tolerance 1e-2 + 1e-2 |ref| is smallest
    rtol, atol = DEFAULT_TOLERANCES["float16"]
    assert 0.95 * torch_err > atol + rtol * abs(ref.flat[at]), "premise: the planted faults miss the tolerance"
    return model, x, buf.getvalue(), ref, torch_err, at


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_float16_as_close_as_pytorch(shift, factor):
    """Outside the float16 tolerance, a file passes when it is no further from the float32 copy than
    PyTorch float16 (0.031, measured): 0.95x of that passes by that rule, 1.05x is refused."""
    model, x, data, ref, torch_err, at = shift
    session = Planted(data, at, np.float16(ref.flat[at] + factor * torch_err))
    if factor < 1:
        (check,) = verify(model, (x,), data, session=session).checks.values()
        assert check.reference == "float32 copy" and "as close to the float32 model as PyTorch float16" in check.rule
        assert check.pytorch_error == pytest.approx(torch_err) and check.error <= torch_err
        return
    with pytest.raises(VerificationError, match=r"more than PyTorch's own float16 output"):
        verify(model, (x,), data, session=session)


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_a_given_float16_tolerance_is_a_hard_bound(shift, factor):
    """With atol given, "as close as PyTorch" no longer applies: the file 0.95x PyTorch's error off (which the
    default rules pass, test above) is refused at atol = 0.95x that error, passed at 1.05x."""
    model, x, data, ref, torch_err, at = shift
    planted = float(np.float16(ref.flat[at] + 0.95 * torch_err)) - ref.flat[at]
    session = Planted(data, at, np.float16(ref.flat[at] + 0.95 * torch_err))
    if factor > 1:
        (check,) = verify(model, (x,), data, rtol=0.0, atol=factor * planted, session=session).checks.values()
        assert "given tolerance" in check.rule and check.error == pytest.approx(planted)
        return
    with pytest.raises(VerificationError, match=r"rtol=0.0, given\), a hard bound"):
        verify(model, (x,), data, rtol=0.0, atol=factor * planted, session=session)
