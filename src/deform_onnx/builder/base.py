"""The small "emit an op" interface every lowering is written against.

A lowering is written once against :class:`Builder`; three adapters drive it:
the TorchScript symbolic (``g.op``), the dynamo translation (onnxscript's
tracing evaluator) and the file rewriter (onnx-ir). Attribute values are plain
Python values (ints, floats, strings, lists); constants are numpy arrays.

Values are opaque handles of the adapter (``torch._C.Value``,
``onnx_ir.Value``). Dimensions are either Python ints (static) or 1-element
int64 tensors (dynamic, read with ``Shape`` at run time): the helpers below
keep every shape path integer-only, as TensorRT requires for shape tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .written import note

Value = Any
#: A dimension: a static Python int or a dynamic int64 tensor of shape [1].
Dim = int | Value


class Builder:
    """Base class of the op-emitting adapters.

    Subclasses implement :meth:`_emit`, :meth:`_constant`, :meth:`static_shape`
    and :meth:`dtype`, and set :attr:`opset` (the default-domain opset the
    emitted ops must be valid at).
    """

    opset: int

    # -- adapter hooks -------------------------------------------------
    def _emit(self, op_type: str, inputs: Sequence[Value | None], attrs: dict, domain: str = "") -> Value:
        raise NotImplementedError

    def _constant(self, array: np.ndarray) -> Value:
        raise NotImplementedError

    def static_shape(self, value: Value) -> tuple[int | None, ...] | None:
        """Shape with ``None`` for dynamic dims, or ``None`` if the rank is unknown."""
        raise NotImplementedError

    def dtype(self, value: Value) -> np.dtype | None:
        """Numpy dtype of a value, or ``None`` if unknown."""
        raise NotImplementedError

    # -- public helpers -------------------------------------------------
    def op(self, op_type: str, *inputs: Value | None, domain: str = "", **attrs) -> Value:
        """Emit one node with a single output; ``None`` inputs are omitted optionals.

        Attribute values: ints, floats, strings, lists of them, or numpy arrays (tensor attributes).
        """
        out = self._emit(op_type, list(inputs), attrs, domain)
        note(op_type)  # the form a deformable call writes is read from its ops (.written)
        if op_type == "Cast" and not domain:
            # Some adapters (onnxscript's tracer) type a Cast's output only later: remember it.
            from onnx.helper import tensor_dtype_to_np_dtype

            self.__dict__.setdefault("_cast_dtypes", {})[id(out)] = (
                out,
                np.dtype(tensor_dtype_to_np_dtype(attrs["to"])),
            )
        return out

    def declare_shape(self, value: Value, shape: tuple[int | None, ...], like: Value) -> Value:
        """``value``, told to the exporter as ``shape`` (``None`` per dimension not known statically) of ``like``'s dtype.

        Returns the value to use in its place: ``value`` itself where the exporter types values itself; the
        TorchScript adapter overrides it (its per-node shape inference loses a lowering's output shape, and the
        model's next deformable call then saw a map of unknown size).
        """
        return value

    def value_dtype(self, value: Value) -> np.dtype | None:
        """:meth:`dtype`, or the target type of a Cast this builder emitted."""
        dt = self.dtype(value)
        if dt is None:
            known = self.__dict__.get("_cast_dtypes", {}).get(id(value))
            if known is not None and known[0] is value:
                dt = known[1]
        return dt

    def const(self, array) -> Value:
        """Emit a constant tensor (a numpy array, kept at its dtype)."""
        return self._constant(np.asarray(array))

    def constant_array(self, value: Value) -> np.ndarray | None:
        """``value``'s data when it is a constant the builder can read (a file's initializer), else ``None``."""
        return None

    def i64(self, values) -> Value:
        """An int64 constant."""
        return self.const(np.asarray(values, dtype=np.int64))

    def float_const(self, values, like: Value) -> Value:
        """A floating constant with the dtype of ``like`` (dtype-generic graphs)."""
        dt = self.value_dtype(like)
        if dt is not None:
            return self.const(np.asarray(values, dtype=dt))
        if self.opset >= 15:
            return self.op("CastLike", self.const(np.asarray(values, dtype=np.float32)), like)
        raise ValueError(
            "the input's dtype is unknown and CastLike needs opset >= 15: "
            "give the input a known dtype or export at opset 15 or higher"
        )

    def cast_like(self, value: Value, like: Value) -> Value:
        """Cast ``value`` to the dtype of ``like``."""
        dt = self.value_dtype(like)
        if dt is not None:
            from onnx.helper import np_dtype_to_tensor_dtype

            return self.op("Cast", value, to=int(np_dtype_to_tensor_dtype(np.dtype(dt))))
        if self.opset >= 15:
            return self.op("CastLike", value, like)
        raise ValueError("the input's dtype is unknown and CastLike needs opset >= 15")

    def dim(self, value: Value, axis: int) -> Dim:
        """Size of ``value`` along ``axis``: an int if static, else an int64 [1] tensor."""
        shape = self.static_shape(value)
        if shape is not None and shape[axis] is not None:
            return int(shape[axis])  # type: ignore[arg-type]  # not None: checked above
        return self.op("Gather", self.op("Shape", value), self.i64([axis]), axis=0)

    def shape_vector(self, dims: Sequence[Dim]) -> Value:
        """A 1-D int64 shape tensor from static ints and dynamic [1] tensors."""
        if all(isinstance(d, int) for d in dims):
            return self.i64(list(dims))
        parts, run = [], []
        for d in dims:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                parts.append(self.i64(run))
                run = []
            parts.append(d)
        if run:
            parts.append(self.i64(run))
        return self.op("Concat", *parts, axis=0)

    def mul_dim(self, a: Dim, b: Dim) -> Dim:
        """Product of two dimensions (integer-only when dynamic)."""
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        return self.op("Mul", self.as_dim(a), self.as_dim(b))

    def add_dim(self, a: Dim, b: Dim) -> Dim:
        """Sum of two dimensions (integer-only when dynamic)."""
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        return self.op("Add", self.as_dim(a), self.as_dim(b))

    def scalar(self, d: Dim) -> Value:
        """A 0-D int64 tensor holding a dimension (for Range)."""
        if isinstance(d, int):
            return self.i64(d)
        return self.op("Reshape", d, self.i64(np.zeros((0,), dtype=np.int64)))

    def as_dim(self, d: Dim) -> Value:
        """A dimension as a 1-element int64 value (a static int becomes a constant)."""
        return self.i64([d]) if isinstance(d, int) else d

    def reshape(self, value: Value, dims: Sequence[Dim]) -> Value:
        """Reshape to ``dims`` (``0`` copies the input dim, ``-1`` infers)."""
        return self.op("Reshape", value, self.shape_vector(dims))

    def unsqueeze(self, value: Value, axes: Sequence[int]) -> Value:
        """``value`` with axes of size 1 inserted (``axes`` became an input at opset 13)."""
        if self.opset >= 13:
            return self.op("Unsqueeze", value, self.i64(list(axes)))
        return self.op("Unsqueeze", value, axes=list(axes))

    def reduce_sum(self, value: Value, axes: Sequence[int], keepdims: int = 1) -> Value:
        """``ReduceSum`` over ``axes`` (``axes`` became an input at opset 13)."""
        if self.opset >= 13:
            return self.op("ReduceSum", value, self.i64(list(axes)), keepdims=keepdims)
        return self.op("ReduceSum", value, axes=list(axes), keepdims=keepdims)

    def slice(self, value: Value, start: int, end: int, axis: int) -> Value:
        """Static slice ``[start:end]`` along one axis (Slice-10+ form)."""
        return self.op("Slice", value, self.i64([start]), self.i64([end]), self.i64([axis]))


class IRValueBuilder(Builder):
    """Shape and dtype queries over ``onnx_ir.Value`` (shared by the dynamo and rewrite adapters)."""

    def constant_array(self, value):
        """The value's data when it is an onnx-ir constant (an initializer), else ``None``."""
        tensor = getattr(value, "const_value", None)
        return None if tensor is None else np.asarray(tensor.numpy())

    def static_shape(self, value):
        """The value's shape from onnx-ir (``None`` per unknown dimension; ``None`` for an unknown rank)."""
        shape = getattr(value, "shape", None)
        if shape is None:
            return None
        return tuple(d if isinstance(d, int) else None for d in shape)

    def dtype(self, value):
        """The value's numpy dtype from onnx-ir, or ``None`` when unknown."""
        dt = getattr(value, "dtype", None)
        if dt is None:
            return None
        try:
            return np.dtype(dt.numpy())
        except (TypeError, ValueError, AttributeError):
            return None


class TapeBuilder(IRValueBuilder):
    """:class:`Builder` that records nodes on an ``onnx_ir.tape.Tape`` (file rewriting)."""

    def __init__(self, opset: int, name_prefix: str = ""):
        from onnx_ir import tape

        self.opset = opset
        self.tape = tape.Tape()
        self._prefix = name_prefix
        self._count = 0

    def _name(self, op_type: str) -> str | None:
        if not self._prefix:
            return None
        self._count += 1
        return f"{self._prefix}/{op_type}_{self._count}"

    def _emit(self, op_type, inputs, attrs, domain=""):
        import onnx_ir as ir

        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {k: ir.tensor(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
        return self.tape.op(op_type, inputs, attrs or None, domain=domain, name=self._name(op_type))

    def _constant(self, array):
        import onnx_ir as ir

        return self.tape.op("Constant", [], {"value": ir.tensor(array)}, name=self._name("Constant"))
