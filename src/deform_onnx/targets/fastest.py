"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {
    "command": "PYTHONPATH=src python scripts/runtime_venvs.py bench --repeats 5 --rounds 1",
    "date": "2026-12-07",
    "machine": "Intel(R) Xeon(R) Processor, 2 cores, Python 3.11.7",
    "load": ["0.71 / 1.03 / 1.50", "1.24 / 1.09 / 1.32"],
    "minutes": 8.4,
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
    "rounds": 1,
    "op": "deform_conv2d",
    "shapes": ["1x64x64", "1x256x32", "4x64x32", "1x64x64 og8"],
    "dense": "dense Conv",
    "targets": {
        "onnxruntime": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.0867, "1x256x32": 3.8616, "4x64x32": 1.0078, "1x64x64 og8": 1.0433},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.5117, "1x256x32": 6.725, "4x64x32": 3.5426, "1x64x64 og8": 5.4465},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 19,
                "ms": {"1x64x64": 5.763, "1x256x32": 9.1332, "4x64x32": 6.124, "1x64x64 og8": 13.8512},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 19,
                "ms": {"1x64x64": 6.8584, "1x256x32": 8.6013, "4x64x32": 8.2546, "1x64x64 og8": 25.3293},
                "notes": {},
                "off": {},
            },
        },
        "openvino-extension": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.9937, "1x256x32": 4.8282, "4x64x32": 2.0958, "1x64x64 og8": 2.2076},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 3.1849, "1x256x32": 8.9308, "4x64x32": 3.1878, "1x64x64 og8": 11.2774},
                "notes": {},
                "off": {},
            },
        },
        "openvino": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.0709, "1x256x32": 4.9175, "4x64x32": 2.0037, "1x64x64 og8": 2.3889},
                "notes": {},
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 4.2742, "1x256x32": 7.4203, "4x64x32": 4.2558, "1x64x64 og8": 5.6434},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 7.6078, "1x256x32": 8.9599, "4x64x32": 7.1793, "1x64x64 og8": 13.0508},
                "notes": {},
                "off": {},
            },
            "convert_model (PyTorch module)": {
                "opset": None,
                "ms": {"1x64x64": 3.2453, "1x256x32": 9.1718, "4x64x32": 2.9079, "1x64x64 og8": 11.1285},
                "notes": {},
                "off": {},
            },
        },
        "mnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.1338, "1x256x32": 2.9519, "4x64x32": 2.4286, "1x64x64 og8": 2.7138},
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
                "ms": {"1x64x64": 6.1833, "1x256x32": 11.6544, "4x64x32": 6.8966, "1x64x64 og8": 12.0469},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 17.4178, "1x256x32": 14.8755, "4x64x32": 17.96, "1x64x64 og8": 45.3357},
                "notes": {},
                "off": {},
            },
        },
        "ncnn": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 2.0559, "1x256x32": 3.5056, "4x64x32": None, "1x64x64 og8": 2.456},
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
                "ms": {"1x64x64": 5.0841, "1x256x32": 8.9627, "4x64x32": None, "1x64x64 og8": 11.9599},
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
                "ms": {"1x64x64": 2.9165, "1x256x32": 10.581, "4x64x32": 3.1994, "1x64x64 og8": 3.0515},
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
                "ms": {"1x64x64": None, "1x256x32": 28.244, "4x64x32": 19.9393, "1x64x64 og8": 34.6994},
                "notes": {"1x64x64": "wrong: 2.7 off"},
                "off": {},
            },
            "gather": {
                "opset": 13,
                "ms": {"1x64x64": 19.9746, "1x256x32": 21.6783, "4x64x32": 18.9541, "1x64x64 og8": 44.7091},
                "notes": {},
                "off": {},
            },
        },
        "tvm": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 4.9544, "1x256x32": 12.2542, "4x64x32": 3.5953, "1x64x64 og8": 5.0919},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": None,
                "ms": {"1x64x64": None, "1x256x32": None, "4x64x32": None, "1x64x64 og8": None},
                "notes": {
                    "1x64x64": "refused: target 'tvm': tvm loadable ops: DeformConv (1 "
                    "node(s), first node_deform_conv2d, from torc",
                    "1x256x32": "refused: target 'tvm': tvm loadable ops: DeformConv "
                    "(1 node(s), first node_deform_conv2d, from torc",
                    "4x64x32": "refused: target 'tvm': tvm loadable ops: DeformConv (1 "
                    "node(s), first node_deform_conv2d, from torc",
                    "1x64x64 og8": "refused: target 'tvm': tvm loadable ops: "
                    "DeformConv (1 node(s), first node_deform_conv2d, "
                    "from torc",
                },
                "off": {},
            },
            "grid_sample": {
                "opset": 17,
                "ms": {"1x64x64": 17.4661, "1x256x32": 39.7234, "4x64x32": 15.2099, "1x64x64 og8": 20.279},
                "notes": {},
                "off": {},
            },
            "gather": {
                "opset": 17,
                "ms": {"1x64x64": 10.9357, "1x256x32": 17.266, "4x64x32": 12.277, "1x64x64 og8": 35.4485},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch-native": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.4024, "1x256x32": 4.1159, "4x64x32": 1.2456, "1x64x64 og8": 1.4516},
                "notes": {},
                "off": {},
            },
            "native": {
                "opset": 19,
                "ms": {"1x64x64": 33.5151, "1x256x32": 35.4923, "4x64x32": 34.6986, "1x64x64 og8": 39.639},
                "notes": {},
                "off": {},
            },
        },
        "onnx2torch": {
            "dense Conv": {
                "opset": 17,
                "ms": {"1x64x64": 1.4171, "1x256x32": 4.107, "4x64x32": 1.1658, "1x64x64 og8": 1.4731},
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
                "ms": {"1x64x64": 25.4873, "1x256x32": 20.4619, "4x64x32": 20.5115, "1x64x64 og8": 42.8845},
                "notes": {},
                "off": {},
            },
        },
    },
}
