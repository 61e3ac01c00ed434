"""Tiny models for lowerd verify's tests."""

import torch
from torch import nn

import lowerd


class Clamped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 16)
        self.last = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)  # LINE-MARK: first
        h = torch.nn.functional.hardtanh(h)  # the op a broken pass changes LINE-MARK: hardtanh
        h = torch.cumsum(h, 1)  # LINE-MARK: cumsum
        return self.last(h)


def _model() -> Clamped:
    torch.manual_seed(0)
    return Clamped().eval()


def make():  # LINE-MARK: make
    return _model(), (torch.randn(2, 8, generator=torch.Generator().manual_seed(1)) * 3,)


def make_dynamic():
    batch = torch.export.Dim("batch", min=1, max=8)
    model, args = make()
    return model, args, {"x": {0: batch}}


def batch_extremes():
    """The dynamic batch at its min and its max."""
    generator = torch.Generator().manual_seed(2)
    return [(torch.randn(1, 8, generator=generator),), (torch.randn(8, 8, generator=generator),)]


class Lookup(nn.Module):
    """An embedding (on the CPU: its weight a constant of the program) and a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids))


def make_two():
    model, args = make()
    torch.manual_seed(3)
    return {
        "forward": lowerd.Method(model, args),
        "lookup": lowerd.Method(Lookup().eval(), (torch.tensor([[1, 2, 3]]),)),
    }


class Running(nn.Module):
    """A running product: cumprod has no kernel in the host runtime, so the .pte cannot run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, 1)


def make_running():  # LINE-MARK: running.entry
    return Running().eval(), (torch.rand(2, 4) + 0.5,)


class Logits(nn.Module):
    """An LLM's last step at a real size: (64, 32000) float logits, 8 MiB, the ids past the
    vocabulary's end masked with -inf as samplers mask them."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 32000)
        self.register_buffer("padding", torch.arange(32000) >= 31900)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x).masked_fill(self.padding, float("-inf"))


def make_logits():
    torch.manual_seed(4)
    return Logits().eval(), (torch.randn(64, 16, generator=torch.Generator().manual_seed(5)),)
