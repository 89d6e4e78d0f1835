"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 5 --rounds 2",
    "date": "2026-12-07",
    "machine": "Intel(R) Xeon(R) Processor, 2 cores, Python 3.11.7",
    "load": ["0.72 / 1.03 / 1.81", "1.08 / 1.05 / 1.36"],
    "minutes": 13.7,
    "versions": {
        "onnxruntime": "1.32.0",
        "openvino": "2026.4.1",
        "mnn": "3.6.1",
        "ncnn": "1.0.20261020",
        "tflite": "onnx2tf 1.29.24 + LiteRT 2.1.0",
        "tvm": "0.27.0.post1",
        "onnx2torch": "1.5.15",
    },
    "repeats": 5,
    "rounds": 2,
    "op": "deform_conv2d",
    "shapes": ["1x64x64", "1x256x32", "4x64x32", "1x64x64 og8"],
    "dense": "dense Conv",
    "targets": {
        "onnxruntime": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.4248, "1x256x32": 3.8221, "4x64x32": 2.0418, "1x64x64 og8": 1.4492},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.809, "1x256x32": 6.4185, "4x64x32": 3.4185, "1x64x64 og8": 4.9823},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 5.6483, "1x256x32": 8.6005, "4x64x32": 6.0287, "1x64x64 og8": 12.7977},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 9.5244, "1x256x32": 8.0954, "4x64x32": 7.7156, "1x64x64 og8": 24.6313},
                "notes": {},
                "off": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.9111, "1x256x32": 6.243, "4x64x32": 2.0601, "1x64x64 og8": 2.0205},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.0603, "1x256x32": 9.8452, "4x64x32": 3.264, "1x64x64 og8": 10.3835},
                "notes": {},
                "off": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.9607, "1x256x32": 5.9829, "4x64x32": 2.0744, "1x64x64 og8": 2.0514},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 3.9097, "1x256x32": 6.7496, "4x64x32": 4.4259, "1x64x64 og8": 4.4824},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 6.3543, "1x256x32": 8.3581, "4x64x32": 7.2647, "1x64x64 og8": 10.3169},
                "notes": {},
                "off": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 2.5975, "1x256x32": 6.9429, "4x64x32": 3.8989, "1x64x64 og8": 9.9605},
                "notes": {},
                "off": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.4119, "1x256x32": 2.9049, "4x64x32": 2.6877, "1x64x64 og8": 2.4259},
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
                "ms": {"1x64x64": 7.2451, "1x256x32": 11.0509, "4x64x32": 8.3215, "1x64x64 og8": 11.9094},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 13.4526, "1x256x32": 16.9031, "4x64x32": 16.6752, "1x64x64 og8": 44.5477},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.0802, "1x256x32": 3.3258, "4x64x32": None, "1x64x64 og8": 2.373},
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
                "ms": {"1x64x64": 4.7815, "1x256x32": 8.641, "4x64x32": None, "1x64x64 og8": 10.8597},
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
                "ms": {"1x64x64": 2.5443, "1x256x32": 10.4254, "4x64x32": 3.1366, "1x64x64 og8": 2.6463},
                "notes": {},
                "off": {"1x64x64": "6.3 off", "1x64x64 og8": "6.3 off"},
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
                "off": {},
            },
            "grid_sample": {
                "opset": 16,
                "ms": {"1x64x64": None, "1x256x32": 26.5136, "4x64x32": 18.856, "1x64x64 og8": 32.3557},
                "notes": {"1x64x64": "wrong: 2.7 off"},
                "off": {},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 17.8853, "1x256x32": 22.7068, "4x64x32": 21.0875, "1x64x64 og8": 43.0845},
                "notes": {},
                "off": {},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 4.6009, "1x256x32": 11.7846, "4x64x32": 3.4955, "1x64x64 og8": 4.5375},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'tvm' mishandles native (DeformConv): "
                    "TVM 0.27's relax ONNX frontend has no DeformC",
                    "1x256x32": "refused: target 'tvm' mishandles native (DeformConv): "
                    "TVM 0.27's relax ONNX frontend has no DeformC",
                    "4x64x32": "refused: target 'tvm' mishandles native (DeformConv): "
                    "TVM 0.27's relax ONNX frontend has no DeformC",
                    "1x64x64 og8": "refused: target 'tvm' mishandles native "
                    "(DeformConv): TVM 0.27's relax ONNX frontend has "
                    "no DeformC",
                },
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 8.341, "1x256x32": 28.7016, "4x64x32": 6.6458, "1x64x64 og8": 9.9054},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 8.731, "1x256x32": 14.7504, "4x64x32": 9.0061, "1x64x64 og8": 23.0435},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch-native": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.5171, "1x256x32": 3.8694, "4x64x32": 1.1457, "1x64x64 og8": 1.2555},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 32.3121, "1x256x32": 32.8788, "4x64x32": 33.5072, "1x64x64 og8": 33.959},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.6141, "1x256x32": 3.7337, "4x64x32": 1.2278, "1x64x64 og8": 1.3288},
                "notes": {},
                "off": {},
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
                "off": {},
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
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 22.2961, "1x256x32": 18.8167, "4x64x32": 18.794, "1x64x64 og8": 47.3173},
                "notes": {},
                "off": {},
            },
        },
    },
}
