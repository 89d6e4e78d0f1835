"""Build the lowered bundled example with TensorRT and compare it with PyTorch (not part of CI).

Needs a machine with an NVIDIA GPU and, already installed (this script installs
nothing): the ``tensorrt`` wheel (TensorRT >= 10; the native ``DeformConv``
lowering needs >= 10.1, which parses it through its ModulatedDeformConv2d
plugin), and either a CUDA build of torch or ``cuda-python`` for the device
buffers. Usage, from the repository root::

    python scripts/tensorrt_check.py                    # grid_sample@17, gather@17, native@19
    python scripts/tensorrt_check.py --dynamic          # dynamic N, H, W (optimization profile)
    python scripts/tensorrt_check.py --fp16 --method gather --opset 13
    python scripts/tensorrt_check.py --export-only      # the ONNX side only (no GPU needed)

For each lowering: export ``deform_onnx.cli.example.example_model()`` with the
TorchScript exporter (ONNX Runtime CPU verifies it against PyTorch first),
parse it with TensorRT's ONNX parser, build an engine (TF32 off, so float32 is
float32), run it on the bundled photo (and, with ``--dynamic``, on a second
batch and size) and compare with PyTorch's float32 output on the CPU.

Tolerance: float32 max abs error <= 1e-3 (outputs reach ~11; GPU convolution and
GEMM kernels sum in other orders than the CPU), float16 <= 2e-2 * max|output|
(10-bit mantissa through ten layers). One line per lowering goes to stderr, then
one verdict line to stdout; exit code 0 when every lowering parses, builds and
matches, 1 otherwise.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing

DEFAULT_JOBS = (("grid_sample", 17), ("gather", 17), ("native", 19))
#: Optimization profile of the dynamic input (min, opt, max) and the second size it is run at.
PROFILE = ((1, 3, 64, 64), (1, 3, 128, 128), (2, 3, 192, 192))
SECOND_SIZE = (2, 160, 144)


@dataclass
class Outcome:
    method: str
    opset: int
    ok: bool
    detail: str


# -- device buffers: torch (CUDA build) or cuda-python ---------------------------------------------


class _TorchCuda:
    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch has no CUDA device")
        self.torch = torch
        self.stream = torch.cuda.Stream()
        self.name = torch.cuda.get_device_name(0)

    def upload(self, array: np.ndarray):
        t = self.torch.from_numpy(np.ascontiguousarray(array)).cuda()
        return t, t.data_ptr()

    def empty(self, shape, dtype: np.dtype):
        t = self.torch.empty(tuple(shape), dtype=getattr(self.torch, np.dtype(dtype).name), device="cuda")
        return t, t.data_ptr()

    def download(self, handle) -> np.ndarray:
        return handle.cpu().numpy()

    def stream_handle(self) -> int:
        return self.stream.cuda_stream

    def synchronize(self) -> None:
        self.stream.synchronize()


class _CudaPython:
    def __init__(self):
        try:
            from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
        except ImportError:
            from cuda import cudart  # older cuda-python
        self.rt = cudart
        err, self.stream = cudart.cudaStreamCreate()
        self._check(err)
        err, props = cudart.cudaGetDeviceProperties(0)
        self._check(err)
        self.name = props.name.decode(errors="replace").rstrip("\x00")

    def _check(self, err) -> None:
        if int(err) != 0:
            raise RuntimeError(f"CUDA runtime error {err}")

    def _alloc(self, nbytes: int) -> int:
        err, ptr = self.rt.cudaMalloc(max(nbytes, 1))
        self._check(err)
        return int(ptr)

    def upload(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        ptr = self._alloc(array.nbytes)
        (err,) = self.rt.cudaMemcpy(ptr, array.ctypes.data, array.nbytes, self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice)
        self._check(err)
        return (ptr, array.shape, array.dtype), ptr

    def empty(self, shape, dtype: np.dtype):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        ptr = self._alloc(nbytes)
        return (ptr, tuple(shape), np.dtype(dtype)), ptr

    def download(self, handle) -> np.ndarray:
        ptr, shape, dtype = handle
        out = np.empty(shape, dtype)
        (err,) = self.rt.cudaMemcpy(out.ctypes.data, ptr, out.nbytes, self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)
        self._check(err)
        return out

    def stream_handle(self) -> int:
        return int(self.stream)

    def synchronize(self) -> None:
        (err,) = self.rt.cudaStreamSynchronize(self.stream)
        self._check(err)


def _device():
    errors = []
    for cls in (_TorchCuda, _CudaPython):
        try:
            return cls()
        except Exception as exc:  # noqa: BLE001 - try the next one, report all
            errors.append(f"{cls.__name__[1:]}: {type(exc).__name__}: {exc}")
    raise RuntimeError(
        "no CUDA device buffers (" + "; ".join(errors) + "): install a CUDA build of torch or cuda-python"
    )


# -- TensorRT ----------------------------------------------------------------------------------------------


def _build_engine(trt, logger, path: Path, fp16: bool, dynamic: bool, input_name: str):
    """Parse ``path`` and build an engine; returns ``(engine, None)`` or ``(None, why)``."""
    major = int(trt.__version__.split(".")[0])
    builder = trt.Builder(logger)
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errors = []
        for i in range(parser.num_errors):
            e = parser.get_error(i)
            where = getattr(e, "node_name", lambda: "")() or getattr(e, "node_operator", lambda: "")()
            errors.append(f"{where}: {e.desc()}" if where else e.desc())
        return None, "parser: " + " | ".join(errors)[:400]
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    else:
        config.clear_flag(trt.BuilderFlag.TF32)  # compare float32 with float32
    if dynamic:
        profile = builder.create_optimization_profile()
        profile.set_shape(input_name, *PROFILE)
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        return None, "build_serialized_network returned None (see TensorRT's log above)"
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    if engine is None:
        return None, "deserialize_cuda_engine returned None"
    return engine, None


def _run_engine(trt, engine, device, x: np.ndarray) -> np.ndarray:
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    assert len(inputs) == 1 and len(outputs) == 1, (inputs, outputs)
    handles = []
    context.set_input_shape(inputs[0], x.shape)
    handle, ptr = device.upload(x.astype(trt.nptype(engine.get_tensor_dtype(inputs[0]))))
    handles.append(handle)
    context.set_tensor_address(inputs[0], ptr)
    shape = tuple(context.get_tensor_shape(outputs[0]))
    out, out_ptr = device.empty(shape, trt.nptype(engine.get_tensor_dtype(outputs[0])))
    context.set_tensor_address(outputs[0], out_ptr)
    if not context.execute_async_v3(device.stream_handle()):
        raise RuntimeError("execute_async_v3 failed")
    device.synchronize()
    return device.download(out).astype(np.float32)


# -- the check ---------------------------------------------------------------------------------------------


def _export(model, photo, method: str, opset: int, dynamic: bool, folder: Path) -> Path:
    import deform_onnx

    path = folder / f"example_{method}_op{opset}{'_dynamic' if dynamic else ''}.onnx"
    axes = {"image": {0: "N", 2: "H", 3: "W"}} if dynamic else None
    deform_onnx.export(model, (photo,), path, opset_version=opset, method=method, dynamo=False,
                       input_names=["image"], output_names=["features"], dynamic_axes=axes)  # fmt: skip
    return path


def _error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        raise RuntimeError(f"output shape {got.shape} != PyTorch {want.shape}")
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())


def main(
    method: list[str] | None = typer.Option(None, "--method", "-m", help="Lowering(s) to check (repeatable)."),
    opset: int | None = typer.Option(
        None, "--opset", help="One opset for every --method (default: grid_sample/gather 17, native 19)."
    ),
    dynamic: bool = typer.Option(False, "--dynamic", help="Dynamic N, H, W; also run at a second batch and size."),
    fp16: bool = typer.Option(False, "--fp16", help="Let TensorRT use float16 kernels (I/O stays float32)."),
    export_only: bool = typer.Option(
        False, "--export-only", help="Export and verify in ONNX Runtime only (no TensorRT)."
    ),
    keep: Path | None = typer.Option(
        None, "--keep", help="Write the .onnx files to this folder (default: a temporary one)."
    ),
) -> None:
    """Build the lowered bundled example with TensorRT and compare it with PyTorch."""
    import torch

    from deform_onnx.cli.example import example_model, load_photo

    defaults = dict(DEFAULT_JOBS)
    methods = method or [m for m, _ in DEFAULT_JOBS]
    jobs = [(m, opset if opset is not None else defaults.get(m, 17)) for m in methods]
    model = example_model()
    photo = load_photo()
    runs = [photo]
    if dynamic:
        n, h, w = SECOND_SIZE
        runs.append(load_photo((h, w)).expand(n, -1, -1, -1).contiguous())
    with torch.no_grad():
        wants = [model(x).numpy() for x in runs]

    trt = logger = device = None
    where = "ONNX Runtime only"
    if not export_only:
        try:
            import tensorrt as trt
        except ImportError:
            typer.echo("TensorRT check: SKIPPED - the tensorrt wheel is not installed (this script installs nothing)")
            raise typer.Exit(1) from None
        logger = trt.Logger(trt.Logger.WARNING)
        trt.init_libnvinfer_plugins(logger, "")  # DeformConv -> ModulatedDeformConv2d plugin (TensorRT >= 10.1)
        device = _device()
        where = f"TensorRT {trt.__version__} on {device.name}"

    folder_ctx = tempfile.TemporaryDirectory() if keep is None else None
    folder = Path(folder_ctx.name) if folder_ctx else keep
    folder.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    try:
        for m, o in jobs:
            label = f"{m}@{o}{' dynamic' if dynamic else ''}{' fp16' if fp16 else ''}"
            try:
                path = _export(model, photo, m, o, dynamic, folder)
            except Exception as exc:  # noqa: BLE001 - report and go on
                outcomes.append(
                    Outcome(m, o, False, f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                )
                typer.echo(f"{label}: {outcomes[-1].detail}", err=True)
                continue
            if export_only:
                outcomes.append(Outcome(m, o, True, f"exported and verified in ONNX Runtime: {path.name}"))
                typer.echo(f"{label}: {outcomes[-1].detail}", err=True)
                continue
            start = time.perf_counter()
            engine, why = _build_engine(trt, logger, path, fp16, dynamic, "image")
            if engine is None:
                outcomes.append(Outcome(m, o, False, why))
                typer.echo(f"{label}: {why}", err=True)
                continue
            build_s = time.perf_counter() - start
            try:
                errors = [_error(_run_engine(trt, engine, device, x.numpy()), want) for x, want in zip(runs, wants)]
            except Exception as exc:  # noqa: BLE001
                outcomes.append(Outcome(m, o, False, f"run failed: {type(exc).__name__}: {exc}"))
                typer.echo(f"{label}: {outcomes[-1].detail}", err=True)
                continue
            scale = max(1.0, float(max(np.abs(w).max() for w in wants)))
            tol = 2e-2 * scale if fp16 else 1e-3
            err = max(errors)
            ok = err <= tol
            outcomes.append(Outcome(m, o, ok, f"max abs error {err:.2e} (tolerance {tol:.1e}), build {build_s:.1f} s"))
            typer.echo(f"{label}: {'ok' if ok else 'MISMATCH'}: {outcomes[-1].detail}", err=True)
    finally:
        if folder_ctx is not None:
            folder_ctx.cleanup()

    passed = all(x.ok for x in outcomes)
    parts = ", ".join(f"{x.method}@{x.opset} {'ok' if x.ok else 'FAILED'}" for x in outcomes)
    mode = ("dynamic" if dynamic else "static") + (", fp16" if fp16 else ", fp32")
    typer.echo(f"TensorRT check ({where}; {mode}): {'PASS' if passed else 'FAIL'} - {parts}")
    raise typer.Exit(0 if passed else 1)


if __name__ == "__main__":
    typer.run(main)
