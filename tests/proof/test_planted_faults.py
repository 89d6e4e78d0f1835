"""Planted faults on every runner (issue 35, item 7): each is refused, naming the output and the runtime.

The model and its faults are ``tests/runtime_files.py``'s: :class:`Five`'s five outputs (``y`` a DCNv2
layer, ``k`` an int64 argmax, ``z`` ``4 tanh`` of a convolution, ``v`` ``y`` with 1000 added to four channels,
``w`` a convolution), exported once per runtime's target (conftest's session fixture ``family_files``, shared
with tests/runtimes/test_deployed.py), and the file planted through the ONNX graph (no mock of the
comparison): ``k_bad`` one off (b), ``z_bad`` cast to float16 (c), ``v_bad`` 0.5 off on its small channels,
checked with ``rtol=1e-3`` given for it (d; a whole-output bound ``atol + rtol * max|v|`` is about 1 there),
``w_bad`` a moved weight (a, the last output).

The reference is the model's outputs, then again those with a copy. Each family converts and runs the planted
file once (module-scoped, through :func:`deform_onnx.check_runtimes`): the healthy outputs must be right
(checked here against PyTorch, ``y`` within :data:`BOUND`) and pass, each fault must be in what the runtime
returned (checked here) and be named, with the runtime, in the refusal, and nothing is kept. ncnn's file has
neither ``k`` nor the float16 copy. ONNX Runtime and OpenVINO also run in this interpreter through
:class:`deform_onnx.proof.OnnxRuntimeRunner` and :class:`deform_onnx.proof.OpenVINORunner` (the ONNX file and
its IR); a healthy file passes on OpenVINO and its kept IR reruns here.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.proof import OnnxRuntimeRunner, OpenVINORunner, compare_outputs
from runtime_files import BOUND, CASTS_TO_FLOAT16, DEPLOYED, TARGETS, Five, five_inputs, planted_outputs

#: The float32 rule for the healthy file, checked here per element (the project's 1e-4 at unit scale).
RTOL = ATOL = 1e-4


@pytest.fixture(scope="module", params=list(TARGETS))
def family_run(request, family_files):
    """Per family: the planted file converted and run once through ``check_runtimes`` (keeping artifacts; shared
    with tests/runtimes/test_sealed.py, which checks that the runs left the user's environment alone)."""
    name = request.param
    if name in DEPLOYED and os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1":
        pytest.skip("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1")
    row, kept = family_files.checked(name)
    return name, family_files.get(name).want, row, kept


def _held(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Which elements of ``got`` are within the float32 rule of ``want`` (exact for integers), computed here."""
    if want.dtype.kind in "iub":
        return got.astype(np.int64) == want.astype(np.int64)
    return np.abs(got.astype(np.float64) - want) <= ATOL + RTOL * np.abs(want.astype(np.float64))


@pytest.mark.slow
def test_every_output_judged_on_its_own(family_run) -> None:
    """One run of the planted file: each healthy output right and passed, each planted fault in what the runtime
    returned and named with the runtime in the refusal; nothing kept."""
    name, want, row, kept = family_run
    assert row.error is None, row.error
    got = dict(row.outputs)
    bad = [f"{n}_bad" for n in planted_outputs(name)]
    assert list(got) == [*want, *bad]
    for n in want:  # the healthy outputs, checked here against PyTorch
        assert got[n].shape == want[n].shape and _held(got[n], want[n]).all(), (name, n)
    assert float(np.abs(got["y"] - want["y"]).max()) < BOUND  # the DCNv2 output, as measured per family
    assert row.version and row.ms is not None
    # the faults are in the runtime's own outputs (computed here)
    assert not _held(got["w_bad"], want["w"]).all()
    small = np.abs(got["v_bad"][:, 4:] - want["v"][:, 4:] - 0.5).max()
    assert small <= 1e-3, small  # 0.5 off on the small channels ...
    assert 1e-4 + 1e-3 * np.abs(want["v"]).max() >= 0.5  # ... which a whole-output bound would pass
    if "k" in planted_outputs(name):
        assert np.array_equal(got["k_bad"].astype(np.int64), want["k"] + 1)
    faulted = ["w_bad", "v_bad"] + (["k_bad"] if "k" in planted_outputs(name) else [])
    if "z" in planted_outputs(name) and name in CASTS_TO_FLOAT16:
        faulted.append("z_bad")
        assert got["z_bad"].dtype == np.float16
        off = np.abs(got["z_bad"].astype(np.float32) - want["z"])
        assert off.max() <= 2**-10 + 1e-5 and not _held(got["z_bad"], want["z"]).all()  # float16 rounding (|z| < 4)
    elif "z" in planted_outputs(name):  # the runtime returns float32 for the float16 output: right there, and passed
        assert got["z_bad"].dtype == np.float32 and _held(got["z_bad"], want["z"]).all()
    assert not row.ok
    message = row.failure or ""
    assert message.startswith(f"{name} ({row.version}): output "), message
    for n in faulted:
        assert f"{name} ({row.version}): output {n!r} " in message, (n, message)
    for n in set(got) - set(faulted):
        assert f"output {n!r}" not in message, (n, message)
    if "z_bad" in faulted:
        assert "output 'z_bad' is float16 where the reference is float32 (a precision drop" in message
    assert row.worst_output in faulted
    assert list(kept.iterdir()) == []  # nothing kept from a runtime that failed


@pytest.fixture(scope="module")
def ort_files(family_files, tmp_path_factory):
    """The ONNX Runtime target's files (shared) and a folder of this module's own."""
    files = family_files.get("onnxruntime")
    return (files.healthy, files.faulted, files.reference, files.want), tmp_path_factory.mktemp("proof-inprocess")


@pytest.fixture(scope="module")
def inputs() -> torch.Tensor:
    return five_inputs()


def test_healthy_file_kept_and_rerun(ort_files, inputs) -> None:
    """A healthy file passes check_runtimes on OpenVINO; its IR is kept readable (0644) and reruns right here."""
    (healthy, _, _, want), folder = ort_files
    kept = folder / "kept"
    kept.mkdir()
    model = Five().eval()
    (row,) = deform_onnx.check_runtimes(healthy, ["openvino"], model=model, args=(inputs,), keep_artifacts=kept,
                                        repeats=1)  # fmt: skip
    assert row.ok and row.failure is None and row.worst_output in want, row
    assert sorted(p.name for p in kept.iterdir()) == [f"{healthy.stem}.bin", f"{healthy.stem}.xml"]
    umask = os.umask(0)
    os.umask(umask)
    for kept_file in kept.iterdir():  # readable like any file the user writes (not mkstemp's 0600)
        assert kept_file.stat().st_mode & 0o777 == 0o666 & ~umask, kept_file
    runner = OpenVINORunner()  # the kept IR, rerun here in a plain Core at float32 inference
    runner.load(kept / f"{healthy.stem}.xml")
    for n, got in runner.run({"x": inputs.numpy()}):
        assert _held(got, want[n]).all(), n


@pytest.mark.parametrize("runner", ["onnxruntime", "openvino", "openvino IR"])
def test_in_process_runners_refuse_the_planted_faults(ort_files, inputs, runner: str) -> None:
    """ONNX Runtime and OpenVINO (ONNX file and IR) in this interpreter: every planted output named, the rest pass."""
    (_, faulted, reference, want), folder = ort_files
    path = faulted
    if runner == "openvino IR":
        import openvino as ov

        path = folder / "planted.xml"
        ov.save_model(ov.convert_model(str(faulted)), str(path), compress_to_fp16=False)
    run = OnnxRuntimeRunner() if runner == "onnxruntime" else OpenVINORunner()
    run.load(path)
    got = run.run({"x": inputs.numpy()})
    with torch.no_grad():
        expected = [t.numpy() for t in reference(inputs)]
    names = [n for n, _ in got]
    assert names == [*want, "k_bad", "z_bad", "v_bad", "w_bad"]
    result = compare_outputs(got, list(zip(names, expected)), runtime=run.label, per_output={"v_bad": (1e-3, None)})
    assert {o.name for o in result.failures} == {"k_bad", "z_bad", "v_bad", "w_bad"}
    message = result.message()
    assert all(f"{run.label}: output {n!r}" in message for n in ("k_bad", "z_bad", "v_bad", "w_bad")), message
    assert not _held(dict(got)["w_bad"], want["w"]).all()  # the fault is in what the runtime returned
