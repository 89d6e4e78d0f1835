"""The ONNX ops each deployed runtime's converter loads, read from its installed package (generated).

Written by ``scripts/loadable_ops.py`` from the cached runtime venvs; do not edit by hand. ``TABLES[runtime]``:
``version`` (the package it was read from), ``source`` (where in it), ``ops`` (space-separated op names) and,
for onnx2torch, ``versions`` (``op:v1,v2`` the converter versions: an op's node at an opset between two
versions is converted by the lower one).
"""

TABLES: dict[str, dict[str, str]] = {
    "tflite": {
        "version": "onnx2tf 1.29.24",
        "source": "onnx2tf/ops/<Op>.py (one converter module per ONNX op)",
        "ops": (
            "Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh Attention AveragePool "
            "BatchNormalization Bernoulli BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor BlackmanWindow Cast "
            "Ceil Celu CenterCropPad Clip Col2Im Compress Concat ConcatFromSequence Constant ConstantOfShape Conv "
            "ConvInteger ConvTranspose Cos Cosh CumProd CumSum DFT DeformConv DepthToSpace DequantizeLinear Det "
            "Div Dropout DynamicQuantizeLinear Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor FusedConv "
            "GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater "
            "GreaterOrEqual GridSample GroupNorm GroupNormalization HammingWindow HannWindow HardSigmoid "
            "HardSwish Hardmax Identity If ImageDecoder Input InstanceNormalization Inverse IsInf IsNaN LRN LSTM "
            "LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop LpNormalization LpPool MatMul "
            "MatMulInteger Max MaxPool MaxRoiPool MaxUnpool Mean MeanVarianceNormalization MelWeightMatrix Min "
            "Mish Mod Mul Multinomial Neg NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Optional "
            "OptionalGetElement OptionalHasElement Or PRelu Pad Pow QLinearAdd QLinearConcat QLinearConv "
            "QLinearLeakyRelu QLinearMatMul QLinearMul QLinearSigmoid QLinearSoftmax QuantizeLinear "
            "RMSNormalization RNN RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal "
            "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum "
            "ReduceSumSquare RegexFullMatch Relu Reshape Resize ReverseSequence RoiAlign RotaryEmbedding Round "
            "STFT ScaleAndTranslate Scan Scatter ScatterElements ScatterND Selu SequenceAt SequenceConstruct "
            "SequenceEmpty SequenceErase SequenceInsert SequenceLength Shape Shrink Sigmoid Sign Sin Sinh Size "
            "Slice Softmax SoftmaxCrossEntropyLoss Softplus Softsign SpaceToDepth Split SplitToSequence Sqrt "
            "Squeeze StringConcat StringNormalizer StringSplit Sub Sum Tan Tanh TensorScatter TfIdfVectorizer "
            "ThresholdedRelu Tile TopK Transpose Trilu Unique Unsqueeze Upsample Where Xor "
        ),
    },
    "onnx2torch": {
        "version": "onnx2torch 1.5.15",
        "source": "onnx2torch.node_converters.registry._CONVERTER_REGISTRY",
        "ops": (
            "Abs Acos Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization Cast Ceil Celu Clip Concat "
            "Constant ConstantOfShape Conv ConvTranspose Cos CumSum DepthToSpace Div Dropout Einsum Elu Equal Erf "
            "Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm GlobalAveragePool Greater "
            "GreaterOrEqual HardSigmoid HardSwish Identity InstanceNormalization IsInf IsNaN LRN "
            "LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax MatMul Max MaxPool Mean Min Mod Mul Neg "
            "NonMaxSuppression NonZero Not Or PRelu Pad Pow Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum "
            "ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape "
            "Resize RoiAlign Round ScatterND Selu Shape Sigmoid Sign Sin Slice Softmax Softplus Softsign Split "
            "Sqrt Squeeze Sub Sum Tan Tanh Tile TopK Transpose Unsqueeze Where Xor "
        ),
        "versions": (
            "Abs:6,13 Acos:7 Add:1,6,7,13,14 And:1,7 ArgMax:11,12,13 ArgMin:11,12,13 Asin:7 Atan:7 "
            "AveragePool:7,10,11 BatchNormalization:9,14,15 Cast:9,13 Ceil:6,13 Celu:12 Clip:6,11,12,13 "
            "Concat:4,11,13 Constant:9,11,12,13 ConstantOfShape:9 Conv:1,11 ConvTranspose:1,11 Cos:7 CumSum:11,14 "
            "DepthToSpace:11,13 Div:1,6,7,13,14 Dropout:10,12,13 Einsum:12 Elu:6 Equal:7,11,13 Erf:9,13 Exp:6,13 "
            "Expand:8,13 EyeLike:9 Flatten:9,11,13 Floor:6,13 Gather:1,11,13 GatherElements:11,13 "
            "GatherND:11,12,13 Gemm:9,11,13 GlobalAveragePool:1 Greater:7,9,13 GreaterOrEqual:12 HardSigmoid:1,6 "
            "HardSwish:14 Identity:1,13,14,16 InstanceNormalization:1,6 IsInf:10 IsNaN:13 LRN:1,13 "
            "LayerNormalization:17 LeakyRelu:1,6,16 Less:7,9,13 LessOrEqual:12 Log:6,13 LogSoftmax:1,11,13 "
            "MatMul:1,9,13 Max:8,12,13 MaxPool:8,10,11,12 Mean:8,13 Min:8,12,13 Mod:10,13 Mul:1,6,7,13,14 "
            "Neg:1,6,13 NonMaxSuppression:10,11 NonZero:13 Not:1 Or:1,7 PRelu:7,9,16 Pad:2,11,13 Pow:1,7,12,13,15 "
            "Range:11 Reciprocal:1,6,13 ReduceL1:1,11,13 ReduceL2:1,11,13 ReduceLogSum:1,11,13 "
            "ReduceLogSumExp:1,11,13 ReduceMax:1,11,12,13 ReduceMean:1,11,13 ReduceMin:1,11,12,13 "
            "ReduceProd:1,11,13 ReduceSum:1,11,13 ReduceSumSquare:1,11,13 Relu:6,13,14 Reshape:5,13,14 "
            "Resize:10,11,13 RoiAlign:10,16 Round:11 ScatterND:11,13,16 Selu:6 Shape:1,13,15 Sigmoid:1,6,13 "
            "Sign:9,13 Sin:7 Slice:9,10,11,13 Softmax:1,11,13 Softplus:1 Softsign:1 Split:2,11,13 Sqrt:1,6,13 "
            "Squeeze:1,11,13,21 Sub:1,6,7,13,14 Sum:8,13 Tan:7 Tanh:6,13 Tile:6,13 TopK:1,10,11 Transpose:1,13 "
            "Unsqueeze:1,11,13 Where:9,16 Xor:1,7 "
        ),
    },
    "tvm": {
        "version": "apache-tvm 0.27.0.post1",
        "source": "tvm.relax.frontend.onnx.onnx_frontend._get_convert_map",
        "ops": (
            "Abs Acos Acosh Add AffineGrid AllClassNMS And ArgMax ArgMin Asin Asinh Atan Atanh Attention "
            "AveragePool BatchNormalization BiasGelu BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast "
            "CastLike Ceil Clip Compress Concat ConcatFromSequence Constant ConstantOfShape Conv ConvTranspose "
            "Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout DynamicQuantizeLinear Einsum Elu "
            "EmbedLayerNormalization Equal Erf Exp Expand EyeLike FastGelu Flatten Floor Gather GatherElements "
            "GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample "
            "GroupNormalization HardSigmoid HardSwish Hardmax Identity InstanceNormalization IsInf IsNaN LRN "
            "LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpPool MatMul MatMulInteger "
            "MatMulInteger16 Max MaxPool MaxRoiPool MaxUnpool Mean MeanVarianceNormalization Min Mish Mod Mul Neg "
            "NonMaxSuppression NonZero Not OneHot Optional OptionalGetElement OptionalHasElement Or PRelu Pad Pow "
            "QuantizeLinear RMSNormalization Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp "
            "ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize RoiAlign "
            "Round Scatter ScatterElements ScatterND Selu SequenceAt SequenceConstruct SequenceEmpty "
            "SequenceErase SequenceInsert SequenceLength Shape Shrink Sigmoid Sign Sin Sinh Size "
            "SkipLayerNormalization Slice Softmax Softplus Softsign SpaceToDepth Split SplitToSequence Sqrt "
            "Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unique Unsqueeze Upsample Where "
            "Xor "
        ),
    },
    "mnn": {
        "version": "MNN 3.6.1",
        "source": "MNNConvert -f ONNX --OP (the converter's own list)",
        "ops": (
            "ATan ATen Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization "
            "BitShift Cast CastLike Ceil Celu Clip Compress Concat ConcatFromSequence Constant ConstantOfShape "
            "Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Det Div Dropout "
            "DynamicQuantizeLinear Einsum Elu Equal Erf Erfc Erfinv Exp Expand Expm1 EyeLike Flatten Floor GRU "
            "Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater "
            "GreaterOrEqual GridSample GridSampler HardSigmoid HardSwish Identity If InstanceNormalization LRN "
            "LSTM LayerNorm LayerNormalization LeakyRelu Less LessOrEqual Log Log1p LogSoftmax Loop "
            "LpNormalization LpPool MatMul Max MaxPool MaxRoiPool MaxUnpool Mean MeanVarianceNormalization Min "
            "Mod Mul Neg NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Or PRelu Pad Pow "
            "QuantizeLinear RNN RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal "
            "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum "
            "ReduceSumSquare Relu Reshape Resize ReverseSequence RoiAlign Round STFT Scatter ScatterElements "
            "ScatterND Selu SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert "
            "SequenceLength Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax SoftmaxCrossEntropyLoss "
            "Softplus Softsign SpaceToDepth Split SplitToSequence Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu "
            "Tile TopK Transpose Trilu Unique Unsqueeze Upsample Where Xor raster_grad texture texture_mipmap "
        ),
    },
}
