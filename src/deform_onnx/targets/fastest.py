"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 5 --rounds 2",
    "date": "2026-12-07",
    "machine": "AMD EPYC, 2 cores, Python 3.11.7",
    "load": ["1.33 / 1.83 / 3.04", "1.24 / 1.17 / 2.02"],
    "minutes": 11.1,
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
                "ms": {"1x64x64": 1.843, "1x256x32": 5.6747, "4x64x32": 1.4377, "1x64x64 og8": 2.4075},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 5.5284, "1x256x32": 8.4737, "4x64x32": 5.09, "1x64x64 og8": 5.682},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 5.577, "1x256x32": 10.3626, "4x64x32": 8.3938, "1x64x64 og8": 16.0929},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 7.9916, "1x256x32": 9.0578, "4x64x32": 8.8682, "1x64x64 og8": 33.3422},
                "notes": {},
                "off": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 3.5412, "1x256x32": 6.8954, "4x64x32": 3.5092, "1x64x64 og8": 3.3145},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 5.4103, "1x256x32": 9.3941, "4x64x32": 5.6652, "1x64x64 og8": 15.6926},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 6.2763, "1x256x32": 14.9682, "4x64x32": 7.0198, "1x64x64 og8": 7.9695},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 10.3092, "1x256x32": 13.5861, "4x64x32": 10.6253, "1x64x64 og8": 21.594},
                "notes": {},
                "off": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 3.4547, "1x256x32": 7.466, "4x64x32": 3.6223, "1x64x64 og8": 3.5526},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 7.2512, "1x256x32": 14.3381, "4x64x32": 7.7932, "1x64x64 og8": 9.8556},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 11.4634, "1x256x32": 12.0379, "4x64x32": 10.0816, "1x64x64 og8": 19.6262},
                "notes": {},
                "off": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 5.896, "1x256x32": 12.4498, "4x64x32": 6.3773, "1x64x64 og8": 15.8942},
                "notes": {},
                "off": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.7275, "1x256x32": 4.4582, "4x64x32": 2.5885, "1x64x64 og8": 2.1497},
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
                "ms": {"1x64x64": 9.292, "1x256x32": 14.6684, "4x64x32": 9.6736, "1x64x64 og8": 12.0498},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 19.7082, "1x256x32": 23.7906, "4x64x32": 25.0179, "1x64x64 og8": 37.216},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 3.139, "1x256x32": 4.1288, "4x64x32": None, "1x64x64 og8": 2.9561},
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
                "ms": {"1x64x64": 7.1173, "1x256x32": 8.7249, "4x64x32": None, "1x64x64 og8": 9.037},
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
                "ms": {"1x64x64": 5.5577, "1x256x32": 14.2659, "4x64x32": 4.532, "1x64x64 og8": 4.1889},
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
                "ms": {"1x64x64": 17.5221, "1x256x32": 22.2258, "4x64x32": 14.473, "1x64x64 og8": 37.0392},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 13.2032, "1x256x32": 21.033, "4x64x32": 14.1616, "1x64x64 og8": 28.6364},
                "notes": {},
                "off": {},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 5.0858, "1x256x32": 12.1226, "4x64x32": 3.1932, "1x64x64 og8": 4.8222},
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
                "ms": {"1x64x64": 8.4703, "1x256x32": 19.2322, "4x64x32": 10.4297, "1x64x64 og8": 10.2312},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 8.2033, "1x256x32": 17.9883, "4x64x32": 8.8008, "1x64x64 og8": 24.996},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch-native": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.6305, "1x256x32": 6.0928, "4x64x32": 1.5923, "1x64x64 og8": 1.8967},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 36.7393, "1x256x32": 38.326, "4x64x32": 33.601, "1x64x64 og8": 44.0709},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.5323, "1x256x32": 8.4905, "4x64x32": 1.4707, "1x64x64 og8": 1.6265},
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
                "ms": {"1x64x64": 24.4784, "1x256x32": 27.5172, "4x64x32": 24.0986, "1x64x64 og8": 39.3264},
                "notes": {},
                "off": {},
            },
        },
    },
    "partial runs": [
        {
            "targets": ["openvino-extension", "openvino"],
            "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --families openvino "
            "--repeats 5 --rounds 2",
            "date": "2026-12-08",
            "machine": "AMD EPYC, 2 cores, Python 3.11.7",
            "load": ["0.59 / 0.79 / 1.29", "1.36 / 0.95 / 1.29"],
            "minutes": 1.4,
            "versions": {"openvino": "2026.4.1"},
        }
    ],
}
