"""Write ``src/deform_onnx/targets/loadable_ops.py``: the ONNX ops each deployed runtime's converter loads.

Each list is read from the runtime's own installed package in its cached venv
(``deform_onnx.runtimes.venvs``, ``~/.cache/deform-onnx/venvs``), never typed by hand:

- ``tflite``: onnx2tf's converters, one module per ONNX op (``onnx2tf/ops/<Op>.py``);
- ``onnx2torch``: onnx2torch's converter registry (``onnx2torch.node_converters.registry``), by op and version;
- ``tvm``: TVM's relax ONNX frontend convert map (``tvm.relax.frontend.onnx.onnx_frontend._get_convert_map``);
- ``mnn``: what ``MNNConvert -f ONNX --OP`` prints (the converter's registered ONNX ops).

Usage: ``python scripts/loadable_ops.py`` (about 30 s: imports TVM once).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

VENVS = Path.home() / ".cache" / "deform-onnx" / "venvs"
OUT = Path(__file__).resolve().parents[1] / "src" / "deform_onnx" / "targets" / "loadable_ops.py"

PROBES = {
    "tflite": """
import json, os, onnx2tf
from importlib.metadata import version
ops = sorted(f[:-3] for f in os.listdir(os.path.join(os.path.dirname(onnx2tf.__file__), "ops"))
             if f.endswith(".py") and f[0].isupper())
print(json.dumps({"version": "onnx2tf " + version("onnx2tf"), "ops": {op: 1 for op in ops},
                  "source": "onnx2tf/ops/<Op>.py (one converter module per ONNX op)"}))
""",
    "onnx2torch": """
import json
from importlib.metadata import version
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY
ops = {}
for d in _CONVERTER_REGISTRY:
    if d.domain in ("", "ai.onnx"):
        ops.setdefault(d.operation_type, []).append(d.version)
print(json.dumps({"version": "onnx2torch " + version("onnx2torch"), "ops": {k: min(v) for k, v in ops.items()},
                  "versions": {k: sorted(v) for k, v in ops.items()},
                  "source": "onnx2torch.node_converters.registry._CONVERTER_REGISTRY"}))
""",
    "tvm": """
import json
from importlib.metadata import version
from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map
print(json.dumps({"version": "apache-tvm " + version("apache-tvm"), "ops": {k: 1 for k in sorted(_get_convert_map())},
                  "source": "tvm.relax.frontend.onnx.onnx_frontend._get_convert_map"}))
""",
    "mnn": """
import json, os, subprocess, sys
from importlib.metadata import version
code = "import _tools; _tools.mnnconvert(['mnnconvert', '-f', 'ONNX', '--OP'])"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
lines = out.splitlines()
ops = lines[lines.index("Dump ONNX support Ops") + 1:]
ops = sorted(l.strip() for l in ops if l.strip() and not l.startswith("Total:"))
print(json.dumps({"version": "MNN " + version("mnn"), "ops": {op: 1 for op in ops},
                  "source": "MNNConvert -f ONNX --OP (the converter's own list)"}))
""",
}

HEAD = '''"""The ONNX ops each deployed runtime's converter loads, read from its installed package (generated).

Written by ``scripts/loadable_ops.py`` from the cached runtime venvs; do not edit by hand. ``TABLES[runtime]``:
``version`` (the package it was read from), ``source`` (where in it), ``ops`` (space-separated op names) and,
for onnx2torch, ``versions`` (``op:v1,v2`` the converter versions: an op's node at an opset between two
versions is converted by the lower one).
"""

TABLES: dict[str, dict[str, str]] = {
'''


def main() -> None:
    tables = {}
    for runtime, code in PROBES.items():
        venv = "onnx2tf" if runtime == "tflite" else runtime
        out = subprocess.run(
            [str(VENVS / venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
        )
        tables[runtime] = json.loads(out.stdout.strip().splitlines()[-1])
    lines = [HEAD]
    for runtime, t in tables.items():
        lines.append(f"    {runtime!r}: {{\n")
        lines.append(f'        "version": {t["version"]!r},\n        "source": {t["source"]!r},\n')
        for key, words in (
            ("ops", sorted(t["ops"])),
            ("versions", [f"{k}:{','.join(map(str, v))}" for k, v in sorted(t.get("versions", {}).items())]),
        ):
            if not words:
                continue
            wrapped = textwrap.wrap(" ".join(words), 100)
            body = "\n".join(f"            {(w + ' ')!r}" for w in wrapped)
            lines.append(f"        {key!r}: (\n{body}\n        ),\n")
        lines.append("    },\n")
    lines.append("}\n")
    OUT.write_text("".join(lines))
    print(f"wrote {OUT}: " + ", ".join(f"{r} {len(t['ops'])} ops ({t['version']})" for r, t in tables.items()))


if __name__ == "__main__":
    main()
