"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 5 --rounds 2",
    "date": "2026-12-07",
    "machine": "Intel(R) Xeon(R) Processor, 2 cores, Python 3.11.7",
    "load": ["0.57 / 1.81 / 2.88", "1.27 / 1.26 / 2.05"],
    "minutes": 9.8,
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
                "ms": {"1x64x64": 1.5978, "1x256x32": 3.608, "4x64x32": 1.0039, "1x64x64 og8": 1.0382},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.9255, "1x256x32": 7.0106, "4x64x32": 3.5072, "1x64x64 og8": 5.3333},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 6.138, "1x256x32": 9.161, "4x64x32": 6.7117, "1x64x64 og8": 13.1643},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 7.7842, "1x256x32": 9.4242, "4x64x32": 9.3041, "1x64x64 og8": 26.2233},
                "notes": {},
                "off": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.1996, "1x256x32": 4.6997, "4x64x32": 2.3079, "1x64x64 og8": 2.2792},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.2597, "1x256x32": 9.7742, "4x64x32": 3.4498, "1x64x64 og8": 11.5267},
                "notes": {},
                "off": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.1579, "1x256x32": 4.6986, "4x64x32": 2.1525, "1x64x64 og8": 2.3312},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 4.5032, "1x256x32": 7.9211, "4x64x32": 4.5032, "1x64x64 og8": 5.456},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 7.438, "1x256x32": 10.1767, "4x64x32": 7.5848, "1x64x64 og8": 11.7237},
                "notes": {},
                "off": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 2.9042, "1x256x32": 9.2589, "4x64x32": 3.1549, "1x64x64 og8": 10.802},
                "notes": {},
                "off": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.3644, "1x256x32": 4.5275, "4x64x32": 2.239, "1x64x64 og8": 2.3697},
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
                "ms": {"1x64x64": 7.884, "1x256x32": 15.2307, "4x64x32": 8.3059, "1x64x64 og8": 12.3426},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 17.6909, "1x256x32": 21.8132, "4x64x32": 17.9222, "1x64x64 og8": 51.5897},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.5983, "1x256x32": 3.5673, "4x64x32": None, "1x64x64 og8": 2.7341},
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
                "ms": {"1x64x64": 5.1932, "1x256x32": 9.2577, "4x64x32": None, "1x64x64 og8": 12.8671},
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
                "ms": {"1x64x64": 3.2689, "1x256x32": 10.8729, "4x64x32": 3.2061, "1x64x64 og8": 3.4038},
                "notes": {},
                "off": {},
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
                "ms": {"1x64x64": 23.0732, "1x256x32": 29.0369, "4x64x32": 19.7951, "1x64x64 og8": 34.6102},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 22.3044, "1x256x32": 24.1724, "4x64x32": 21.6185, "1x64x64 og8": 44.6395},
                "notes": {},
                "off": {},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 4.7952, "1x256x32": 11.9366, "4x64x32": 3.7696, "1x64x64 og8": 4.735},
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
                "ms": {"1x64x64": 9.7006, "1x256x32": 29.8521, "4x64x32": 7.3796, "1x64x64 og8": 10.7285},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 10.8597, "1x256x32": 15.8378, "4x64x32": 10.4148, "1x64x64 og8": 25.5107},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch-native": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.5955, "1x256x32": 3.8528, "4x64x32": 1.2137, "1x64x64 og8": 1.3842},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 35.1163, "1x256x32": 32.9199, "4x64x32": 35.2257, "1x64x64 og8": 35.8412},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.829, "1x256x32": 4.2386, "4x64x32": 1.1905, "1x64x64 og8": 1.4188},
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
                "ms": {"1x64x64": 27.6377, "1x256x32": 22.6454, "4x64x32": 24.0688, "1x64x64 og8": 46.702},
                "notes": {},
                "off": {},
            },
        },
    },
}
