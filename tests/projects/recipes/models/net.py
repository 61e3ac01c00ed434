"""A tiny conv + MLP for ExecuTorch's export recipes: every XNNPACK recipe lowers it (the linear's
in_features are a multiple of the int4 recipes' group sizes, 32 and 64)."""

import torch


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8 * 8 * 8, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def _inputs() -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 3, 8, 8, generator=generator),) for _ in range(2)]


def make() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return TinyNet().eval(), _inputs()[0]


def samples() -> list[tuple[torch.Tensor]]:
    """The calibration samples after the example args: the recipe calibrates on both."""
    return _inputs()[1:]
