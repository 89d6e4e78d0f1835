"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 5 --rounds 2",
    "date": "2026-12-07",
    "machine": "AMD EPYC, 2 cores, Python 3.11.7",
    "load": ["1.04 / 3.14 / 6.24", "1.08 / 1.09 / 2.20"],
    "minutes": 23.1,
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
                "ms": {"1x64x64": 2.8087, "1x256x32": 8.5988, "4x64x32": 2.5371, "1x64x64 og8": 2.6547},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 7.5773, "1x256x32": 14.7292, "4x64x32": 7.9509, "1x64x64 og8": 9.6513},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 12.8479, "1x256x32": 18.2422, "4x64x32": 12.4417, "1x64x64 og8": 23.243},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 17.2602, "1x256x32": 16.4204, "4x64x32": 12.8029, "1x64x64 og8": 62.1477},
                "notes": {},
                "off": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 5.1292, "1x256x32": 11.1273, "4x64x32": 6.4508, "1x64x64 og8": 5.4933},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 7.0521, "1x256x32": 20.9422, "4x64x32": 8.8057, "1x64x64 og8": 18.0146},
                "notes": {},
                "off": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 4.6173, "1x256x32": 12.9257, "4x64x32": 4.8676, "1x64x64 og8": 6.2791},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 11.0845, "1x256x32": 18.6168, "4x64x32": 10.7559, "1x64x64 og8": 15.7423},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 16.1512, "1x256x32": 16.6022, "4x64x32": 16.0868, "1x64x64 og8": 35.6371},
                "notes": {},
                "off": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 8.3598, "1x256x32": 19.0316, "4x64x32": 15.3883, "1x64x64 og8": 16.452},
                "notes": {},
                "off": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 5.8148, "1x256x32": 10.0925, "4x64x32": 4.7778, "1x64x64 og8": 5.8348},
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
                "ms": {"1x64x64": 18.9902, "1x256x32": 23.2732, "4x64x32": 18.3934, "1x64x64 og8": 26.155},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 46.4591, "1x256x32": 33.4242, "4x64x32": 36.6436, "1x64x64 og8": 127.8466},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 4.5768, "1x256x32": 7.2134, "4x64x32": None, "1x64x64 og8": 5.0937},
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
                "ms": {"1x64x64": 13.6226, "1x256x32": 18.2383, "4x64x32": None, "1x64x64 og8": 24.7658},
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
                "ms": {"1x64x64": 10.4079, "1x256x32": 25.087, "4x64x32": 6.6558, "1x64x64 og8": 9.1916},
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
                "ms": {"1x64x64": 29.7116, "1x256x32": 40.3074, "4x64x32": 29.978, "1x64x64 og8": 61.3256},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 23.2742, "1x256x32": 34.3792, "4x64x32": 25.6323, "1x64x64 og8": 60.4506},
                "notes": {},
                "off": {},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 13.6066, "1x256x32": 46.0561, "4x64x32": 9.6766, "1x64x64 og8": 14.0372},
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
                "ms": {"1x64x64": 25.3841, "1x256x32": 74.5867, "4x64x32": 27.8852, "1x64x64 og8": 38.9105},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 26.8035, "1x256x32": 78.3199, "4x64x32": 27.7234, "1x64x64 og8": 46.9004},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch-native": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.8636, "1x256x32": 13.3216, "4x64x32": 4.1128, "1x64x64 og8": 3.1558},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 76.359, "1x256x32": 55.3673, "4x64x32": 63.9928, "1x64x64 og8": 84.0707},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 3.3525, "1x256x32": 11.217, "4x64x32": 3.2391, "1x64x64 og8": 4.4652},
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
                "ms": {"1x64x64": 53.7654, "1x256x32": 43.9525, "4x64x32": 54.8431, "1x64x64 og8": 90.3006},
                "notes": {},
                "off": {},
            },
        },
    },
}
