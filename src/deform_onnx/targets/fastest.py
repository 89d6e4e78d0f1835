"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 3 --rounds 1",
    "date": "2026-12-06",
    "machine": "Intel(R) Xeon(R) Processor, 2 cores, Python 3.11.7",
    "load": ["11.32 / 10.70 / 8.23", "15.70 / 13.99 / 12.59"],
    "minutes": 38.5,
    "versions": {
        "onnxruntime": "1.32.0",
        "openvino": "2026.4.1",
        "mnn": "3.6.1",
        "ncnn": "1.0.20261020",
        "tflite": "onnx2tf 1.29.24 + LiteRT 2.1.0",
        "tvm": "0.27.0.post1",
        "onnx2torch": "1.5.15",
    },
    "shapes": ["1x64x64", "1x256x32", "4x64x32", "1x64x64 og8"],
    "dense": "dense Conv",
    "targets": {
        "onnxruntime": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 11.9516, "1x256x32": 27.8454, "4x64x32": 21.936, "1x64x64 og8": 22.0651},
                "notes": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 64.165, "1x256x32": 58.0541, "4x64x32": 78.5553, "1x64x64 og8": 78.7798},
                "notes": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 88.268, "1x256x32": 116.1667, "4x64x32": 128.6963, "1x64x64 og8": 122.7186},
                "notes": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 203.0436, "1x256x32": 122.1996, "4x64x32": 191.4967, "1x64x64 og8": 373.1972},
                "notes": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 19.374, "1x256x32": 28.2253, "4x64x32": 55.9203, "1x64x64 og8": 15.7571},
                "notes": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 63.5721, "1x256x32": 54.9205, "4x64x32": 75.784, "1x64x64 og8": 103.1071},
                "notes": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 38.1892, "1x256x32": 38.3732, "4x64x32": 52.1087, "1x64x64 og8": 26.9155},
                "notes": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 108.4216, "1x256x32": 49.2827, "4x64x32": 111.8418, "1x64x64 og8": 52.2426},
                "notes": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 119.9436, "1x256x32": 78.8837, "4x64x32": 188.0855, "1x64x64 og8": 132.2121},
                "notes": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 59.6522, "1x256x32": 95.9485, "4x64x32": 59.8562, "1x64x64 og8": 132.644},
                "notes": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 7.7337, "1x256x32": 13.694, "4x64x32": 18.4145, "1x64x64 og8": 7.5828},
                "notes": {},
                "off": {"1x64x64": "0.0054 off", "1x64x64 og8": "0.0054 off"},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'mnn' mishandles native (DeformConv): "
                    "MNN has no DeformConv kernel (not run here: t",
                    "1x256x32": "refused: target 'mnn' mishandles native (DeformConv): "
                    "MNN has no DeformConv kernel (not run here: t",
                    "4x64x32": "refused: target 'mnn' mishandles native (DeformConv): "
                    "MNN has no DeformConv kernel (not run here: t",
                    "1x64x64 og8": "refused: target 'mnn' mishandles native "
                    "(DeformConv): MNN has no DeformConv kernel (not "
                    "run here: t",
                },
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 24.963, "1x256x32": 62.0943, "4x64x32": 24.8024, "1x64x64 og8": 36.0961},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 55.3797, "1x256x32": 61.791, "4x64x32": 44.0596, "1x64x64 og8": 131.1136},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 111.6073, "1x256x32": 111.8638, "4x64x32": None, "1x64x64 og8": 107.9542},
                "notes": {"4x64x32": "output of 65536 values, not 262144"},
                "off": {},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'ncnn' mishandles native "
                    "(DeformConv): ncnn has no DeformConv kernel (not run "
                    "here:",
                    "1x256x32": "refused: target 'ncnn' mishandles native "
                    "(DeformConv): ncnn has no DeformConv kernel (not run "
                    "here:",
                    "4x64x32": "refused: target 'ncnn' mishandles native "
                    "(DeformConv): ncnn has no DeformConv kernel (not run "
                    "here:",
                    "1x64x64 og8": "refused: target 'ncnn' mishandles native "
                    "(DeformConv): ncnn has no DeformConv kernel (not "
                    "run here:",
                },
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 787.7476, "1x256x32": 384.5617, "4x64x32": None, "1x64x64 og8": 620.6464},
                "notes": {
                    "4x64x32": "refused: target 'ncnn': ncnn blobs: 10 value(s) "
                    "that no ncnn blob holds (more than 4-D after a "
                    "lead"
                },
                "off": {},
            },
            "gather": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'ncnn': ncnn blobs: 85 value(s) that "
                    "no ncnn blob holds (more than 4-D after a lead",
                    "1x256x32": "refused: target 'ncnn': ncnn blobs: 43 value(s) that "
                    "no ncnn blob holds (more than 4-D after a lead",
                    "4x64x32": "refused: target 'ncnn': ncnn blobs: 62 value(s) that "
                    "no ncnn blob holds (more than 4-D after a lead",
                    "1x64x64 og8": "refused: target 'ncnn': ncnn blobs: 77 value(s) "
                    "that no ncnn blob holds (more than 4-D after a "
                    "lead",
                },
                "off": {},
            },
        },
        "tflite": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 10.9816, "1x256x32": 44.7054, "4x64x32": 15.5807, "1x64x64 og8": 10.7106},
                "notes": {},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'tflite' mishandles native "
                    "(DeformConv): onnx2tf has no DeformConv kernel (not "
                    "run ",
                    "1x256x32": "refused: target 'tflite' mishandles native "
                    "(DeformConv): onnx2tf has no DeformConv kernel "
                    "(not run ",
                    "4x64x32": "refused: target 'tflite' mishandles native "
                    "(DeformConv): onnx2tf has no DeformConv kernel (not "
                    "run ",
                    "1x64x64 og8": "refused: target 'tflite' mishandles native "
                    "(DeformConv): onnx2tf has no DeformConv kernel "
                    "(not run ",
                },
            },
            "grid_sample": {
                "opset": 16,
                "ms": {"1x64x64": None, "1x256x32": 105.5247, "4x64x32": 79.1108, "1x64x64 og8": 113.9179},
                "notes": {"1x64x64": "wrong: 2.7 off"},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 69.3358, "1x256x32": 68.0362, "4x64x32": 87.358, "1x64x64 og8": None},
                "notes": {"1x64x64 og8": "timed out after 600 s"},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 238.4998, "1x256x32": 947.2962, "4x64x32": 261.4001, "1x64x64 og8": 515.9268},
                "notes": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "The following operators are not supported for frontend ONNX: DeformConv",
                    "1x256x32": "The following operators are not supported for frontend ONNX: DeformConv",
                    "4x64x32": "The following operators are not supported for frontend ONNX: DeformConv",
                    "1x64x64 og8": "The following operators are not supported for frontend ONNX: DeformConv",
                },
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 1810.5801, "1x256x32": 12133.1674, "4x64x32": 417.7137, "1x64x64 og8": 2693.9873},
                "notes": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 198.8191, "1x256x32": 3521.8278, "4x64x32": 172.0595, "1x64x64 og8": 479.4683},
                "notes": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 99.8785, "1x256x32": 147.9551, "4x64x32": 100.0504, "1x64x64 og8": 147.9107},
                "notes": {},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'onnx2torch' mishandles native "
                    "(DeformConv): onnx2torch has no DeformConv "
                    "kernel ('",
                    "1x256x32": "refused: target 'onnx2torch' mishandles native "
                    "(DeformConv): onnx2torch has no DeformConv "
                    "kernel ('",
                    "4x64x32": "refused: target 'onnx2torch' mishandles native "
                    "(DeformConv): onnx2torch has no DeformConv "
                    "kernel ('",
                    "1x64x64 og8": "refused: target 'onnx2torch' mishandles "
                    "native (DeformConv): onnx2torch has no "
                    "DeformConv kernel ('",
                },
            },
            "grid_sample": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'onnx2torch' mishandles "
                    "grid_sample (GridSample): onnx2torch has "
                    "no GridSample conv",
                    "1x256x32": "refused: target 'onnx2torch' mishandles "
                    "grid_sample (GridSample): onnx2torch has "
                    "no GridSample conv",
                    "4x64x32": "refused: target 'onnx2torch' mishandles "
                    "grid_sample (GridSample): onnx2torch has "
                    "no GridSample conv",
                    "1x64x64 og8": "refused: target 'onnx2torch' "
                    "mishandles grid_sample (GridSample): "
                    "onnx2torch has no GridSample conv",
                },
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 2214.8033, "1x256x32": 1888.0864, "4x64x32": 1884.831, "1x64x64 og8": 9207.1114},
                "notes": {},
            },
        },
    },
    "partial runs": [
        {
            "targets": ["mnn", "ncnn"],
            "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --families mnn ncnn "
            "--repeats 3 --rounds 3",
            "date": "2026-12-06",
            "machine": "Intel(R) Xeon(R) Processor, 2 cores, Python 3.11.7",
            "load": ["7.56 / 6.63 / 5.01", "9.14 / 7.65 / 5.74"],
            "minutes": 3.6,
            "versions": {"mnn": "3.6.1", "ncnn": "1.0.20261020"},
        }
    ],
}
