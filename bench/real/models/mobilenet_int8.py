"""transformers' MobileNetV2 (random weights from its config, nothing downloaded), quantized to
int8 with ExecuTorch's documented PT2E flow for XNNPACK: XNNPACKQuantizer with the symmetric
config, prepare_pt2e, two calibration inputs, convert_pt2e."""

from __future__ import annotations

import torch
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

from models.common import SMALL, Logits


def make():
    torch.manual_seed(0)
    if SMALL:
        config = MobileNetV2Config(depth_multiplier=0.35, image_size=64)
    else:
        config = MobileNetV2Config(num_labels=1000)  # 1.0 width, 224 x 224
    model = MobileNetV2ForImageClassification(config).eval()
    model = Logits(model).eval()
    size = config.image_size
    calibration = [(torch.randn(1, 3, size, size),) for _ in range(2)]
    graph = torch.export.export(model, calibration[0]).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(graph, quantizer)
    for inputs in calibration:
        prepared(*inputs)
    return convert_pt2e(prepared), calibration[0]
