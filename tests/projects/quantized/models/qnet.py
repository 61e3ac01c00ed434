"""A tiny int8 CNN, quantized with ExecuTorch's documented PT2E flow for XNNPACK."""

import torch
from torch import nn

HEAD_ACTIVATION = None  # tests set it to torch.relu: a one-line edit at the head


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = self.head(x.flatten(1))
        return HEAD_ACTIVATION(x) if HEAD_ACTIVATION else x


def make():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    example = (torch.randn(1, 3, 8, 8),)
    graph = torch.export.export(Net().eval(), example).module()
    prepared = prepare_pt2e(
        graph, XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    )
    for _ in range(2):  # calibration
        prepared(torch.randn(1, 3, 8, 8))
    return convert_pt2e(prepared), example
